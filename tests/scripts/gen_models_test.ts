import assert from "node:assert/strict";
import { Tokenizer } from "@huggingface/tokenizers";
import * as ort from "onnxruntime-node";
import onnxProto from "onnx-proto";
import {
  BENCH_MODEL_NAME,
  BENCH_SPEC,
  type EncoderSpec,
  float16Bits,
  generateModels,
  MODEL_FILES,
  POISON_TOKEN,
  TINY_MODEL_NAMES,
  TINY_SPECS,
} from "../../scripts/gen_models.ts";

const SENTENCE = "Hello world, this is Synapse.";

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** sha256 of every file under `root`, keyed by relative path. */
async function hashTree(root: string, rel = ""): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const entries = [];
  for await (const e of Deno.readDir(`${root}/${rel}`)) entries.push(e);
  entries.sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const e of entries) {
    const path = rel === "" ? e.name : `${rel}/${e.name}`;
    if (e.isDirectory) {
      for (const [k, v] of await hashTree(root, path)) out.set(k, v);
    } else {
      out.set(path, await sha256Hex(await Deno.readFile(`${root}/${path}`)));
    }
  }
  return out;
}

async function readJson(path: string): Promise<Record<string, unknown>> {
  return JSON.parse(await Deno.readTextFile(path));
}

async function loadTokenizer(dir: string): Promise<Tokenizer> {
  return new Tokenizer(
    await readJson(`${dir}/tokenizer.json`),
    await readJson(`${dir}/tokenizer_config.json`),
  );
}

interface Batch {
  feeds: Record<string, ort.Tensor>;
  lengths: number[];
  seq: number;
}

/** Encodes `texts` (with [CLS]/[SEP]) and right-pads them with [PAD] into int64 [n, seq]. */
function encodeBatch(tokenizer: Tokenizer, texts: string[], padId: number): Batch {
  const encoded = texts.map((t) => tokenizer.encode(t).ids);
  const seq = Math.max(...encoded.map((ids) => ids.length));
  const ids = new BigInt64Array(texts.length * seq).fill(BigInt(padId));
  const mask = new BigInt64Array(texts.length * seq);
  encoded.forEach((row, i) => {
    row.forEach((id, j) => {
      ids[i * seq + j] = BigInt(id);
      mask[i * seq + j] = 1n;
    });
  });
  const dims = [texts.length, seq];
  return {
    feeds: {
      input_ids: new ort.Tensor("int64", ids, dims),
      attention_mask: new ort.Tensor("int64", mask, dims),
      token_type_ids: new ort.Tensor("int64", new BigInt64Array(texts.length * seq), dims),
    },
    lengths: encoded.map((row) => row.length),
    seq,
  };
}

async function run(dir: string, feeds: Record<string, ort.Tensor>): Promise<ort.Tensor> {
  const session = await ort.InferenceSession.create(`${dir}/model.onnx`);
  try {
    const out = await session.run(feeds);
    const name = session.outputNames[0] as string;
    return out[name] as ort.Tensor;
  } finally {
    await session.release();
  }
}

function allFinite(values: Float32Array): boolean {
  return values.every((v) => Number.isFinite(v));
}

/** Float weights of a BERT encoder of `spec` over `vocabSize` tokens (HF parameter count). */
function weightCount(spec: EncoderSpec, vocabSize: number): number {
  const { hidden: h, intermediate: i, layers } = spec;
  const embeddings = (vocabSize + 512 + 2) * h + 2 * h; // word, position, type; LayerNorm
  const layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h; // attention, FFN, 2 LN
  const head = spec.task === "rerank" ? (h * h + h) + (h + 1) : 0; // pooler, classifier
  return embeddings + layers * layer + head;
}

/**
 * Asserts that model.onnx holds the spec's float32 weights and little else: the generator's work
 * (one normal draw per weight, then encoding and hashing) is linear in this size, so bounding the
 * size bounds the cost without a clock. The rest is the graph and a few scalar constants.
 */
function assertModelBytes(spec: EncoderSpec, vocabSize: number, modelBytes: number): void {
  const { hidden: h, intermediate: i, layers } = spec;
  // An int8 model stores its dense MatMul weights in 1 byte each, not 4.
  const int8 = spec.quantize === undefined ? 0 : layers * (4 * h * h + 2 * h * i);
  const weights = (spec.weights === "f16" ? 2 : 4) * weightCount(spec, vocabSize) - 3 * int8;
  // measured: 9.5 KB for 2 layers, 25.7 KB for 6; fp16 models add a Cast node per initializer,
  // int8 ones a scale and zero point per column (5 bytes) and longer names
  const graph = (spec.weights === "f16" || spec.quantize !== undefined ? 8192 : 4096) *
      (spec.layers + 2) + (int8 === 0 ? 0 : 5 * layers * (6 * h + i));
  assert.ok(
    modelBytes >= weights && modelBytes <= weights + graph,
    `${spec.name}: model.onnx is ${modelBytes} bytes for ${weights} bytes of weights`,
  );
}

/** Rows of `out` [n, seq, hidden] for sequence `i`, the first `len` positions. */
function sequence(out: ort.Tensor, i: number, len: number): Float32Array {
  const [, seq, hidden] = out.dims as number[];
  const data = out.data as Float32Array;
  return data.subarray(i * seq! * hidden!, (i * seq! + len) * hidden!);
}

Deno.test("generateModels() writes byte-identical tiny models on two runs", async () => {
  const a = await Deno.makeTempDir();
  const b = await Deno.makeTempDir();
  try {
    const first = await generateModels({ outDir: a });
    await generateModels({ outDir: b });
    assert.deepEqual(first.map((m) => m.name), [...TINY_MODEL_NAMES]);
    assert.ok(first.every((m) => !m.skipped));
    const hashesA = await hashTree(a);
    const hashesB = await hashTree(b);
    assert.deepEqual(hashesA, hashesB);
    const expected = TINY_MODEL_NAMES.flatMap((n) =>
      [...MODEL_FILES, ".complete"].map((f) => `${n}/${f}`)
    );
    assert.deepEqual([...hashesA.keys()].sort(), expected.sort());
    for (const [i, m] of first.entries()) {
      assert.ok(m.modelBytes < 1_000_000, `${m.name} model.onnx is ${m.modelBytes} bytes`);
      const config = await readJson(`${a}/${m.name}/config.json`);
      assertModelBytes(TINY_SPECS[i]!, config.vocab_size as number, m.modelBytes);
      assert.equal(hashesA.get(`${m.name}/onnx/model.onnx`), hashesA.get(`${m.name}/model.onnx`));
    }
  } finally {
    await Deno.remove(a, { recursive: true });
    await Deno.remove(b, { recursive: true });
  }
});

Deno.test("generateModels() skips complete directories and redoes incomplete ones", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await generateModels({ outDir: dir });
    const before = await hashTree(dir);
    const again = await generateModels({ outDir: dir });
    assert.ok(again.every((m) => m.skipped));

    await Deno.remove(`${dir}/synapse-tiny-embed/.complete`);
    await Deno.writeTextFile(`${dir}/synapse-tiny-rerank/tokenizer.json`, "{}");
    const redo = await generateModels({ outDir: dir });
    assert.deepEqual(redo.map((m) => m.skipped), [false, false, true, true, true, true, true]);
    assert.deepEqual(await hashTree(dir), before);

    const forced = await generateModels({ outDir: dir, force: true });
    assert.ok(forced.every((m) => !m.skipped));
    assert.deepEqual(await hashTree(dir), before);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("generateModels() tiny models load and run", async (t) => {
  const root = await Deno.makeTempDir({ prefix: "synapse-gen-models-" });
  try {
    await generateModels({ outDir: root });

    await t.step(
      "tokenizer.json loads in @huggingface/tokenizers with [CLS]/[SEP] and no [UNK]",
      async () => {
        for (const name of TINY_MODEL_NAMES) {
          const dir = `${root}/${name}`;
          const json = await readJson(`${dir}/tokenizer.json`);
          // Deliberately present: Synapse must strip them.
          assert.deepEqual(json.truncation, {
            direction: "Right",
            max_length: 128,
            strategy: "LongestFirst",
            stride: 0,
          });
          assert.deepEqual((json.padding as Record<string, unknown>).strategy, { Fixed: 128 });

          const tokenizer = await loadTokenizer(dir);
          const enc = tokenizer.encode(SENTENCE);
          assert.deepEqual(enc.tokens, [
            "[CLS]",
            "hello",
            "world",
            ",",
            "this",
            "is",
            "synapse",
            ".",
            "[SEP]",
          ]);
          assert.equal(enc.ids[0], 2);
          assert.equal(enc.ids.at(-1), 3);
          assert.equal(tokenizer.token_to_id("[PAD]"), 0);
          assert.equal(tokenizer.token_to_id("[UNK]"), 1);
          assert.equal(tokenizer.token_to_id("[MASK]"), 4);
          assert.equal(tokenizer.get_vocab().size, 2048);
          assert.ok(!tokenizer.encode("Unbelievably quick foxes jumped").tokens.includes("[UNK]"));

          const pair = tokenizer.encode("what is a river", {
            text_pair: "water flows to the sea",
            return_token_type_ids: true,
          });
          assert.equal(pair.tokens.filter((t) => t === "[SEP]").length, 2);
          assert.equal(pair.token_type_ids[0], 0);
          assert.equal(pair.token_type_ids.at(-1), 1);
          assert.equal(
            tokenizer.decode(enc.ids, { skip_special_tokens: true }),
            "hello world, this is synapse.",
          );
        }
      },
    );

    await t.step("config.json is an HF BERT config with the synapse keys", async () => {
      const embed = await readJson(`${root}/synapse-tiny-embed/config.json`);
      assert.equal(embed.model_type, "bert");
      assert.equal(embed.hidden_size, 32);
      assert.equal(embed.num_hidden_layers, 2);
      assert.equal(embed.num_attention_heads, 4);
      assert.equal(embed.intermediate_size, 64);
      assert.equal(embed.vocab_size, 2048);
      assert.equal(embed.synapse_test_model, true);
      assert.equal(embed.synapse_task, "embed");
      assert.equal(embed.synapse_pooling, "mean");
      assert.equal(embed.synapse_max_tokens, 512);
      const rerank = await readJson(`${root}/synapse-tiny-rerank/config.json`);
      assert.equal(rerank.synapse_task, "rerank");
      assert.deepEqual(rerank.architectures, ["BertForSequenceClassification"]);
      const nan = await readJson(`${root}/synapse-tiny-embed-nan/config.json`);
      assert.equal(nan.synapse_poison_token, POISON_TOKEN);
      const tokenizer = await loadTokenizer(`${root}/synapse-tiny-embed-nan`);
      assert.equal(nan.synapse_poison_token_id, tokenizer.token_to_id(POISON_TOKEN));
    });

    await t.step("synapse-tiny-embed runs in onnxruntime-node on a padded batch of 2", async () => {
      const dir = `${root}/synapse-tiny-embed`;
      const tokenizer = await loadTokenizer(dir);
      const texts = [SENTENCE, "A short one."];
      const batch = encodeBatch(tokenizer, texts, 0);
      const out = await run(dir, batch.feeds);
      assert.deepEqual(out.dims, [2, batch.seq, 32]);
      assert.equal(out.type, "float32");
      assert.ok(allFinite(out.data as Float32Array));

      // The mask works: the short text alone gives the same rows as padded in the batch.
      const alone = encodeBatch(tokenizer, [texts[1] as string], 0);
      const single = await run(dir, alone.feeds);
      const padded = sequence(out, 1, alone.seq);
      const unpadded = sequence(single, 0, alone.seq);
      for (let i = 0; i < padded.length; i++) {
        assert.ok(Math.abs(padded[i]! - unpadded[i]!) < 1e-5, `position value ${i} differs`);
      }

      // A long input (512 tokens) works with the dynamic sequence dimension.
      const ids = new BigInt64Array(512).fill(5n);
      const ones = new BigInt64Array(512).fill(1n);
      const long = await run(dir, {
        input_ids: new ort.Tensor("int64", ids, [1, 512]),
        attention_mask: new ort.Tensor("int64", ones, [1, 512]),
        token_type_ids: new ort.Tensor("int64", new BigInt64Array(512), [1, 512]),
      });
      assert.deepEqual(long.dims, [1, 512, 32]);
    });

    await t.step(
      "synapse-tiny-rerank gives finite logits [batch, 1] for query/passage pairs",
      async () => {
        const dir = `${root}/synapse-tiny-rerank`;
        const tokenizer = await loadTokenizer(dir);
        const pairs = [
          ["what is a river", "a river begins as rain"],
          ["what is a river", "the baker opened the door of his shop"],
        ];
        const encoded = pairs.map(([q, p]) =>
          tokenizer.encode(q as string, { text_pair: p as string, return_token_type_ids: true })
        );
        const seq = Math.max(...encoded.map((e) => e.ids.length));
        const ids = new BigInt64Array(2 * seq);
        const mask = new BigInt64Array(2 * seq);
        const types = new BigInt64Array(2 * seq);
        encoded.forEach((e, i) => {
          e.ids.forEach((id, j) => {
            ids[i * seq + j] = BigInt(id);
            mask[i * seq + j] = 1n;
            types[i * seq + j] = BigInt(e.token_type_ids[j]!);
          });
        });
        const out = await run(dir, {
          input_ids: new ort.Tensor("int64", ids, [2, seq]),
          attention_mask: new ort.Tensor("int64", mask, [2, seq]),
          token_type_ids: new ort.Tensor("int64", types, [2, seq]),
        });
        assert.deepEqual(out.dims, [2, 1]);
        const logits = out.data as Float32Array;
        assert.ok(allFinite(logits));
        assert.notEqual(logits[0], logits[1]);
      },
    );

    await t.step(
      "synapse-tiny-embed-nan is non-finite only for the sequence with the poison token",
      async () => {
        const dir = `${root}/synapse-tiny-embed-nan`;
        const tokenizer = await loadTokenizer(dir);
        const texts = ["The river is calm today.", `A ${POISON_TOKEN} grows in the garden.`];
        const batch = encodeBatch(tokenizer, texts, 0);
        const out = await run(dir, batch.feeds);
        assert.deepEqual(out.dims, [2, batch.seq, 32]);
        const clean = sequence(out, 0, batch.seq);
        const poisoned = sequence(out, 1, batch.lengths[1]!);
        assert.ok(allFinite(clean));
        assert.ok(poisoned.some((v) => !Number.isFinite(v)));

        // Same weights as synapse-tiny-embed apart from the poison row.
        const reference = await run(`${root}/synapse-tiny-embed`, batch.feeds);
        assert.deepEqual(clean, sequence(reference, 0, batch.seq));
        assert.ok(allFinite(sequence(reference, 1, batch.seq)));
      },
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("generateModels() writes a deterministic MiniLM-shaped bench model", async () => {
  const a = await Deno.makeTempDir();
  const b = await Deno.makeTempDir();
  try {
    const [result] = await generateModels({ tiny: false, bench: true, benchDir: `${a}/m` });
    assert.equal(result?.name, BENCH_MODEL_NAME);
    await generateModels({ tiny: false, bench: true, benchDir: `${b}/m` });
    assert.deepEqual(await hashTree(a), await hashTree(b));

    const dir = `${a}/m`;
    const config = await readJson(`${dir}/config.json`);
    assert.equal(config.hidden_size, 384);
    assert.equal(config.num_hidden_layers, 6);
    assert.equal(config.num_attention_heads, 12);
    assert.equal(config.intermediate_size, 1536);
    assert.equal(config.vocab_size, 30522);
    assertModelBytes(BENCH_SPEC, 30522, result.modelBytes);
    const tokenizer = await loadTokenizer(dir);
    assert.equal(tokenizer.get_vocab().size, 30522);
    const specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].map((t) =>
      tokenizer.token_to_id(t)
    );
    assert.deepEqual(specials, [0, 100, 101, 102, 103]);
    const batch = encodeBatch(tokenizer, [SENTENCE, "A short one."], 0);
    assert.ok(!tokenizer.encode(SENTENCE).tokens.includes("[UNK]"));
    const out = await run(dir, batch.feeds);
    assert.deepEqual(out.dims, [2, batch.seq, 384]);
    assert.ok(allFinite(out.data as Float32Array));
  } finally {
    await Deno.remove(a, { recursive: true });
    await Deno.remove(b, { recursive: true });
  }
});

Deno.test("float16Bits() rounds to nearest even, keeps subnormals, overflows to Infinity", () => {
  assert.equal(float16Bits(1), 0x3c00);
  assert.equal(float16Bits(-2), 0xc000);
  assert.equal(float16Bits(0), 0);
  assert.equal(float16Bits(-0), 0x8000);
  assert.equal(float16Bits(65504), 0x7bff);
  assert.equal(float16Bits(65520), 0x7c00); // the tie above the largest finite rounds up
  assert.equal(float16Bits(Infinity), 0x7c00);
  assert.equal(float16Bits(-Infinity), 0xfc00);
  assert.equal(float16Bits(NaN) & 0x7e00, 0x7e00);
  assert.equal(float16Bits(2 ** -24), 1); // the smallest subnormal
  assert.equal(float16Bits(2 ** -25), 0); // a tie to even (zero)
  assert.equal(float16Bits(3 * 2 ** -25), 2); // a tie to even (two)
  assert.equal(float16Bits(2 ** -14), 0x0400); // the smallest normal
  assert.equal(float16Bits(0.1), 0x2e66);
  assert.equal(float16Bits(1 + 2 ** -11), 0x3c00); // a tie to even (down)
  assert.equal(float16Bits(1 + 3 * 2 ** -11), 0x3c02); // a tie to even (up)
});

interface DecodedTensor {
  name: string;
  dataType: number;
  rawData: Uint8Array;
}
interface DecodedNode {
  name: string;
  opType: string;
  input: string[];
  output: string[];
  attribute: { i: unknown }[];
}

/** The graph of a generated model.onnx (the generator fills every field read here). */
async function modelGraph(
  path: string,
): Promise<{ initializer: DecodedTensor[]; node: DecodedNode[] }> {
  const m = onnxProto.onnx.ModelProto.decode(await Deno.readFile(path));
  return m.graph as unknown as { initializer: DecodedTensor[]; node: DecodedNode[] };
}

/** Mean-pooled, L2-normalized vectors of `texts` from an embed model directory. */
async function vectors(dir: string, tokenizer: Tokenizer, texts: string[]): Promise<number[][]> {
  const batch = encodeBatch(tokenizer, texts, 0);
  const out = await run(dir, batch.feeds);
  return texts.map((_, i) => {
    const rows = sequence(out, i, batch.lengths[i]!);
    const v = new Array<number>(32).fill(0);
    for (let j = 0; j < rows.length; j++) v[j % 32]! += rows[j]!;
    const norm = Math.hypot(...v);
    return v.map((x) => x / norm);
  });
}

Deno.test("generateModels() fp16 variants: FLOAT16 weights behind Casts, same or perturbed weights", async () => {
  const root = await Deno.makeTempDir({ prefix: "synapse-gen-models-f16-" });
  try {
    await generateModels({ outDir: root });
    const FLOAT = onnxProto.onnx.TensorProto.DataType.FLOAT;
    const FLOAT16 = onnxProto.onnx.TensorProto.DataType.FLOAT16;
    const base = await modelGraph(`${root}/synapse-tiny-embed/model.onnx`);
    const baseInits = new Map(base.initializer.map((t) => [t.name, t]));
    const baseFloats = base.initializer.filter((t) => t.dataType === FLOAT);
    assert.ok(baseFloats.length > 30);

    for (const name of ["synapse-tiny-embed-f16", "synapse-tiny-embed-f16-perturbed"]) {
      const m = await modelGraph(`${root}/${name}/model.onnx`);
      const inits = m.initializer;
      // Every float initializer is FLOAT16 now; the int64 shapes are untouched.
      assert.equal(inits.filter((t) => t.dataType === FLOAT).length, 0, name);
      const halves = inits.filter((t) => t.dataType === FLOAT16);
      assert.deepEqual(halves.map((t) => t.name), baseFloats.map((t) => t.name), name);
      // Each is read through one Cast to FLOAT, before any other node, and nothing else reads it.
      const casts = m.node.slice(0, halves.length);
      for (const [i, t] of halves.entries()) {
        const cast = casts[i]!;
        assert.equal(cast.opType, "Cast");
        assert.deepEqual(cast.input, [t.name]);
        assert.deepEqual(cast.output, [`${t.name}.f32`]);
        assert.equal(Number(cast.attribute[0]!.i), FLOAT);
      }
      const halfNames = new Set(halves.map((t) => t.name));
      for (const n of m.node.slice(halves.length)) {
        assert.ok(n.input.every((i) => !halfNames.has(i)), `${n.name} reads an fp16 tensor`);
      }
      const config = await readJson(`${root}/${name}/config.json`);
      assert.equal(config.synapse_weights_dtype, "f16");
      assert.equal(config.synapse_seed, TINY_SPECS[0]!.seed);

      // Same weights (f16) or not (perturbed): compare each value with the fp32 model's, rounded.
      let equal = 0;
      let total = 0;
      for (const t of halves) {
        const ref = baseInits.get(t.name)!;
        const f32 = new Float32Array(ref.rawData.slice().buffer);
        const f16 = new Uint16Array(t.rawData.slice().buffer);
        assert.equal(f16.length, f32.length);
        for (let i = 0; i < f32.length; i++) {
          total++;
          if (float16Bits(f32[i]!) === f16[i]) equal++;
        }
      }
      if (name === "synapse-tiny-embed-f16") assert.equal(equal, total);
      else assert.ok(equal < total * 0.1, `${equal} of ${total} weights unperturbed`);
    }

    // onnxruntime computes in fp32 from the rounded weights: the f16 model's vectors are the fp32
    // model's (parity passes); the perturbed model's are clearly not (parity fails).
    const tokenizer = await loadTokenizer(`${root}/synapse-tiny-embed`);
    const texts = [SENTENCE, "A short one.", "The river is calm today.", "what is a river"];
    const ref = await vectors(`${root}/synapse-tiny-embed`, tokenizer, texts);
    const meanCos = async (name: string) => {
      const got = await vectors(`${root}/${name}`, tokenizer, texts);
      let sum = 0;
      for (const [i, v] of got.entries()) sum += v.reduce((a, x, d) => a + x * ref[i]![d]!, 0);
      return sum / texts.length;
    };
    const f16 = await meanCos("synapse-tiny-embed-f16");
    const perturbed = await meanCos("synapse-tiny-embed-f16-perturbed");
    assert.ok(f16 > 0.9999, `f16 mean cosine ${f16}`);
    assert.ok(perturbed < 0.99, `perturbed mean cosine ${perturbed}`);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
