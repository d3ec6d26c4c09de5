import { createSynapse } from "./lib/synapse.ts";
import { DEFAULT_CONFIG } from "./lib/config/config.ts";
import { nullLog } from "./lib/log/log.ts";
const dir = await Deno.makeTempDir();
const config = structuredClone(DEFAULT_CONFIG);
config.grammar_enabled = true;
const base = { engine: "llama", pooling: "mean", normalize: true, max_tokens: 512 } as const;
config.preload_models = [
  { ...base, model_path: "fixtures/models/synapse-tiny-llama", tokenizer_path: "fixtures/models/synapse-tiny-llama/tokenizer.json", task: "generate", model_id: "gen" } as any,
  { ...base, model_path: "fixtures/models/synapse-tiny-llama-bytes", tokenizer_path: "fixtures/models/synapse-tiny-llama-bytes/tokenizer.json", task: "generate", model_id: "bytes" } as any,
];
const syn = await createSynapse({ config, storePath: `${dir}/store.db`, log: nullLog, machineProfile: { os_build: "x", arch: "x86_64", chip_model: "x", ram_class: "unknown", engine_identities: [] } as any });
for (const k of [1,2,3,4,5,6,7,12]) {
  const r = await syn.call("bytes" ? "microllm.oneshot" : "", { model: "bytes", prompt: "Hello there", max_tokens: k });
  const b = (r.body as any).result;
  console.log(k, JSON.stringify(b.text), b.generated_token_ids, b.text_repair);
}
for (const g of ['root ::= [a-z]+', 'root ::= "{" ws "\\"answer\\"" ws ":" ws value ws "}"\nvalue ::= "true" | "false" | [0-9]{1,3}\nws ::= [ ]?']) {
  const r = await syn.call("microllm.oneshot", { model: "gen", prompt: "Answer:", max_tokens: 40, grammar: g });
  const b = (r.body as any).result; console.log(JSON.stringify(b?.text ?? r.body), b?.finish_reason, b?.n_gen);
}
const m = syn.registry.resolve("gen", "generate");
for (const p of ["Hello there", "The quick brown fox", "日本語のテキスト and émoji 🎉"]) {
  const r = (await syn.call("microllm.oneshot", { model: "gen", prompt: p, max_tokens: 32 })).body as any;
  console.log(JSON.stringify(r.result.text), JSON.stringify(m.tokenizer!.decode(r.result.generated_token_ids)), r.result.generated_token_ids.filter((i: number) => i < 259));
}
console.log(m.profile!.certified_shape);
await syn.dispose();
