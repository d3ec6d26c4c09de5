/**
 * A GGUF fixture with a chat template: for the chat door's tests (the fixture GGUFs carry none).
 *
 * @module
 */

/**
 * Copies a GGUF with `tokenizer.chat_template` added to its metadata (GGUF v2/v3: the new
 * key/value goes after the others; tensor infos and data follow, data re-aligned).
 */
export async function ggufWithChatTemplate(
  src: string,
  dst: string,
  template: string,
): Promise<void> {
  const bytes = await Deno.readFile(src);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let o = 16;
  const nTensors = Number(dv.getBigUint64(8, true));
  const nKv = Number(dv.getBigUint64(16, true));
  o = 24;
  const kvStart = o;
  const dec = new TextDecoder();
  const str = (): string => {
    const n = Number(dv.getBigUint64(o, true));
    o += 8;
    const s = dec.decode(bytes.subarray(o, o + n));
    o += n;
    return s;
  };
  const SIZES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8 };
  Object.assign(SIZES, { 11: 8, 12: 8 });
  const skip = (type: number): void => {
    if (type === 8) return void str();
    if (type === 9) {
      const t = dv.getUint32(o, true);
      const n = Number(dv.getBigUint64(o + 4, true));
      o += 12;
      for (let i = 0; i < n; i++) skip(t);
      return;
    }
    o += SIZES[type]!;
  };
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const type = dv.getUint32(o, true);
    o += 4;
    if (key === "general.alignment") alignment = dv.getUint32(o, true);
    skip(type);
  }
  const kvEnd = o;
  for (let i = 0; i < nTensors; i++) {
    str();
    const nd = dv.getUint32(o, true);
    o += 4 + 8 * nd + 4 + 8;
  }
  const infoEnd = o;
  const dataStart = Math.ceil(infoEnd / alignment) * alignment;
  const enc = new TextEncoder();
  const key = enc.encode("tokenizer.chat_template");
  const val = enc.encode(template);
  const kv = new Uint8Array(8 + key.length + 4 + 8 + val.length);
  const kvv = new DataView(kv.buffer);
  kvv.setBigUint64(0, BigInt(key.length), true);
  kv.set(key, 8);
  kvv.setUint32(8 + key.length, 8, true);
  kvv.setBigUint64(12 + key.length, BigInt(val.length), true);
  kv.set(val, 20 + key.length);
  const head = bytes.slice(0, 24);
  new DataView(head.buffer).setBigUint64(16, BigInt(nKv + 1), true);
  const infoLen = infoEnd - kvStart + kv.length;
  const newInfoEnd = 24 + infoLen;
  const pad = Math.ceil(newInfoEnd / alignment) * alignment - newInfoEnd;
  const out = new Uint8Array(newInfoEnd + pad + (bytes.length - dataStart));
  out.set(head, 0);
  out.set(bytes.subarray(kvStart, kvEnd), 24);
  out.set(kv, 24 + (kvEnd - kvStart));
  out.set(bytes.subarray(kvEnd, infoEnd), 24 + (kvEnd - kvStart) + kv.length);
  out.set(bytes.subarray(dataStart), newInfoEnd + pad);
  await Deno.writeFile(dst, out);
}
