import assert from "node:assert";
import {
  REQUEST_DIGEST_DOMAIN,
  requestDigest,
  type RequestDigestInput,
} from "../../lib/identity/request_digest.ts";

/** One case of tests/vectors/request_digest.json (snake_case, language-neutral). */
interface VectorCase {
  name: string;
  input: {
    op: string;
    model_id: string;
    remote_profile_hash?: string;
    logical_handle?: string;
    constraints: unknown;
    items: { id: string; content_sha256: string }[];
  };
  encoding_hex: string;
  digest: string;
}

const VECTORS: { cases: VectorCase[] } = JSON.parse(
  Deno.readTextFileSync(new URL("../vectors/request_digest.json", import.meta.url)),
);

function toInput(c: VectorCase): RequestDigestInput {
  const input: RequestDigestInput = {
    op: c.input.op,
    modelId: c.input.model_id,
    constraints: c.input.constraints as RequestDigestInput["constraints"],
    items: c.input.items.map((i) => ({ id: i.id, contentSha256: i.content_sha256 })),
  };
  if (c.input.remote_profile_hash !== undefined) {
    input.remoteProfileHash = c.input.remote_profile_hash;
  }
  if (c.input.logical_handle !== undefined) input.logicalHandle = c.input.logical_handle;
  return input;
}

// ---------------------------------------------------------------------------------------------
// An independent encoder: builds the whole message as one byte buffer, by hand, from the grammar
// in lib/identity/request_digest.ts, and hashes it with WebCrypto. It shares no code with the
// module (own UTF-8 path, own key comparator, BigInt lengths through DataView).
// ---------------------------------------------------------------------------------------------

function u64be(n: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), false);
  return out;
}

function str(s: string): Uint8Array[] {
  const bytes = new TextEncoder().encode(s);
  return [u64be(bytes.length), bytes];
}

function compareUtf16(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = a.charCodeAt(i) - b.charCodeAt(i);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

function encodeValue(v: unknown): Uint8Array[] {
  if (v === null) return [Uint8Array.of(0)];
  if (typeof v === "boolean") return [Uint8Array.of(1, v ? 1 : 0)];
  if (typeof v === "number") return [Uint8Array.of(2), ...str(String(v))];
  if (typeof v === "string") return [Uint8Array.of(3), ...str(v)];
  if (Array.isArray(v)) return [Uint8Array.of(4), u64be(v.length), ...v.flatMap(encodeValue)];
  const entries = Object.entries(v as Record<string, unknown>)
    .filter(([, x]) => x !== undefined)
    .sort(([a], [b]) => compareUtf16(a, b));
  return [
    Uint8Array.of(5),
    u64be(entries.length),
    ...entries.flatMap(([k, x]) => [...str(k), ...encodeValue(x)]),
  ];
}

function opt(s: string | undefined): Uint8Array[] {
  return s === undefined ? [Uint8Array.of(0)] : [Uint8Array.of(1), ...str(s)];
}

function referenceEncoding(input: RequestDigestInput): Uint8Array<ArrayBuffer> {
  const parts = [
    ...str("synapse-request-digest-v1"),
    ...str(input.op),
    ...str(input.modelId),
    ...opt(input.remoteProfileHash),
    ...opt(input.logicalHandle),
    ...encodeValue(input.constraints),
    u64be(input.items.length),
    ...input.items.flatMap((i) => [...str(i.id), ...str(i.contentSha256)]),
  ];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function referenceDigest(input: RequestDigestInput): Promise<string> {
  const bytes = referenceEncoding(input);
  return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
}

// ---------------------------------------------------------------------------------------------

const H1 = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb";
const H2 = "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d";

function base(): RequestDigestInput {
  return {
    op: "embed.batch",
    modelId: "synapse-tiny-embed",
    constraints: { input_type: "document", normalize: true },
    items: [{ id: "a", contentSha256: H1 }, { id: "b", contentSha256: H2 }],
  };
}

Deno.test("requestDigest() matches every case of tests/vectors/request_digest.json", async () => {
  assert.strictEqual(VECTORS.cases.length, 3);
  for (const c of VECTORS.cases) {
    const input = toInput(c);
    assert.strictEqual(hex(referenceEncoding(input)), c.encoding_hex, `${c.name}: bytes`);
    assert.strictEqual(await referenceDigest(input), c.digest, `${c.name}: reference digest`);
    assert.strictEqual(requestDigest(input), c.digest, `${c.name}: module digest`);
  }
});

Deno.test("requestDigest() vectors cover every value tag and the UTF-16 key order", () => {
  const domain = new TextEncoder().encode(REQUEST_DIGEST_DOMAIN);
  for (const c of VECTORS.cases) {
    assert.ok(c.encoding_hex.startsWith(hex(u64be(domain.length)) + hex(domain)), c.name);
  }
  const nested = VECTORS.cases[1]?.input.constraints;
  const tags = new Set<string>();
  (function walk(v: unknown): void {
    if (v === null) tags.add("null");
    else if (Array.isArray(v)) (tags.add("array"), v.forEach(walk));
    else if (typeof v === "object") (tags.add("object"), Object.values(v).forEach(walk));
    else tags.add(typeof v);
  })(nested);
  assert.deepStrictEqual([...tags].sort(), [
    "array",
    "boolean",
    "null",
    "number",
    "object",
    "string",
  ]);
  // U+FF61 sorts after U+1F600 in UTF-16 code units (0xFF61 > 0xD83D) but before it in UTF-8.
  const keys = Object.keys(VECTORS.cases[2]?.input.constraints as object);
  assert.ok(keys.includes("\uff61") && keys.includes("\u{1f600}"));
});

Deno.test("requestDigest() agrees with the independent encoder on random inputs", async () => {
  let seed = 42;
  function rand(n: number): number {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  }
  const alphabet = ["a", "Z", "0", "é", "日", "\u{1f600}", "\uff61", "", " ", '"', "\u0000"];
  function randStr(): string {
    let s = "";
    for (let i = rand(6); i > 0; i--) s += alphabet[rand(alphabet.length)];
    return s;
  }
  function randValue(depth: number): unknown {
    switch (rand(depth > 3 ? 4 : 6)) {
      case 0:
        return null;
      case 1:
        return rand(2) === 1;
      case 2:
        return [0, -1.5, 1e21, 5e-7, 123456789, 0.1 + 0.2, -0, 2 ** 60][rand(8)];
      case 3:
        return randStr();
      case 4:
        return Array.from({ length: rand(4) }, () => randValue(depth + 1));
      default:
        return Object.fromEntries(
          Array.from({ length: rand(4) }, () => [randStr(), randValue(depth + 1)]),
        );
    }
  }
  for (let i = 0; i < 200; i++) {
    const input: RequestDigestInput = {
      op: randStr(),
      modelId: randStr(),
      constraints: randValue(0) as RequestDigestInput["constraints"],
      items: Array.from({ length: rand(5) }, () => ({ id: randStr(), contentSha256: randStr() })),
    };
    if (rand(2) === 1) input.remoteProfileHash = randStr();
    if (rand(2) === 1) input.logicalHandle = randStr();
    assert.strictEqual(requestDigest(input), await referenceDigest(input), JSON.stringify(input));
  }
});

Deno.test("requestDigest() streams large inputs without changing the digest", async () => {
  const big = "é".repeat(100_000); // 200 000 UTF-8 bytes: larger than the scratch buffer
  const input: RequestDigestInput = {
    ...base(),
    constraints: { prompt: big, list: Array.from({ length: 3000 }, (_, i) => i) },
    items: Array.from({ length: 5000 }, (_, i) => ({ id: `item-${i}`, contentSha256: H1 })),
  };
  input.items = [...input.items, { id: big, contentSha256: H2 }];
  assert.strictEqual(requestDigest(input), await referenceDigest(input));
});

Deno.test("requestDigest() returns 64 lowercase hex characters and is deterministic", () => {
  const d = requestDigest(base());
  assert.match(d, /^[0-9a-f]{64}$/);
  assert.strictEqual(requestDigest(base()), d);
});

Deno.test("requestDigest() changes when any field changes", () => {
  const d0 = requestDigest(base());
  const variants: [string, (i: RequestDigestInput) => void][] = [
    ["op", (i) => (i.op = "embed.query")],
    ["model id", (i) => (i.modelId = "other")],
    ["remote profile hash present", (i) => (i.remoteProfileHash = H1)],
    ["remote profile hash empty", (i) => (i.remoteProfileHash = "")],
    ["logical handle present", (i) => (i.logicalHandle = "h")],
    ["logical handle empty", (i) => (i.logicalHandle = "")],
    ["a constraint value", (i) => (i.constraints = { input_type: "query", normalize: true })],
    ["a bool", (i) => (i.constraints = { input_type: "document", normalize: false })],
    ["a key", (i) => (i.constraints = { input_typ: "document", normalize: true })],
    [
      "an extra member",
      (i) => (i.constraints = { input_type: "document", normalize: true, x: null }),
    ],
    ["empty constraints", (i) => (i.constraints = {})],
    ["an item id", (i) => (i.items = [{ id: "A", contentSha256: H1 }, i.items[1]!])],
    ["an item hash", (i) => (i.items = [{ id: "a", contentSha256: H2 }, i.items[1]!])],
    ["item order", (i) => (i.items = [i.items[1]!, i.items[0]!])],
    ["an item dropped", (i) => (i.items = [i.items[0]!])],
    ["no items", (i) => (i.items = [])],
  ];
  const seen = new Map<string, string>([[d0, "base"]]);
  for (const [name, mutate] of variants) {
    const input = base();
    mutate(input);
    const d = requestDigest(input);
    assert.ok(!seen.has(d), `${name} collides with ${seen.get(d)}`);
    seen.set(d, name);
  }
});

Deno.test("requestDigest() keeps field boundaries and value types apart", () => {
  const digestOf = (patch: Partial<RequestDigestInput>): string =>
    requestDigest({ ...base(), ...patch });
  const pairs: [string, Partial<RequestDigestInput>, Partial<RequestDigestInput>][] = [
    ["op/model boundary", { op: "embed.batchx", modelId: "y" }, {
      op: "embed.batch",
      modelId: "xy",
    }],
    ["remote vs logical", { remoteProfileHash: "x" }, { logicalHandle: "x" }],
    ["absent vs empty", {}, { logicalHandle: "" }],
    ["number vs string", { constraints: { k: 1 } }, { constraints: { k: "1" } }],
    ["null vs false", { constraints: [null] }, { constraints: [false] }],
    ["array vs object", { constraints: [] }, { constraints: {} }],
    ["nesting", { constraints: [[1], 2] }, { constraints: [[1, 2]] }],
    ["key/value boundary", { constraints: { ab: "c" } }, { constraints: { a: "bc" } }],
    [
      "id/hash boundary",
      { items: [{ id: "ab", contentSha256: "c" }] },
      { items: [{ id: "a", contentSha256: "bc" }] },
    ],
    [
      "items vs constraints",
      { constraints: null, items: [{ id: "a", contentSha256: "b" }] },
      { constraints: ["a", "b"], items: [] },
    ],
  ];
  for (const [name, a, b] of pairs) assert.notStrictEqual(digestOf(a), digestOf(b), name);
});

Deno.test("requestDigest() ignores object key order and undefined members", () => {
  const a = requestDigest({ ...base(), constraints: { x: 1, y: { b: [1, 2], a: null } } });
  const b = requestDigest({ ...base(), constraints: { y: { a: null, b: [1, 2] }, x: 1 } });
  const c = requestDigest({
    ...base(),
    constraints: { y: { a: null, b: [1, 2], z: undefined }, x: 1 },
  });
  assert.strictEqual(a, b);
  assert.strictEqual(a, c);
  // Numbers are their JS value: 1.0 and 1 are one number, and -0 spells "0".
  assert.strictEqual(
    requestDigest({ ...base(), constraints: [1.0, -0] }),
    requestDigest({ ...base(), constraints: [1, 0] }),
  );
});

Deno.test("requestDigest() refuses what JSON cannot carry", () => {
  for (const bad of [NaN, Infinity, -Infinity]) {
    assert.throws(() => requestDigest({ ...base(), constraints: { k: bad } }), RangeError);
  }
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const notJson: unknown[] = [
    undefined,
    [undefined],
    10n,
    () => 1,
    Symbol("s"),
    new Date(0),
    new Map(),
    cyclic,
    "\ud800",
  ];
  for (const bad of notJson) {
    assert.throws(
      () => requestDigest({ ...base(), constraints: bad as RequestDigestInput["constraints"] }),
      TypeError,
      String(typeof bad),
    );
  }
  assert.throws(() => requestDigest({ ...base(), op: "a\udc00" }), TypeError);
  assert.throws(() => requestDigest({ ...base(), constraints: { "\ud800": 1 } }), TypeError);
  assert.throws(
    () => requestDigest({ ...base(), items: [{ id: 1, contentSha256: H1 }] as never }),
    TypeError,
  );
  // A value shared by two members is not a cycle.
  const shared = [1];
  assert.doesNotThrow(() => requestDigest({ ...base(), constraints: { a: shared, b: shared } }));
});
