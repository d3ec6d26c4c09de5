/**
 * The input file of `ck-synapse embed --file`: JSONL, one item a line, either
 * `{"id": ID, "text": TEXT}` (ID a string or an integer) or a bare JSON string, whose id is its
 * 0-based item number. Blank lines are skipped; every other bad line is a {@link UsageError}
 * naming its 1-based line number.
 *
 * @module
 */
import { UsageError } from "./_command.ts";

/** One item read from the file, as `embed.batch` takes it. */
export interface FileItem {
  /** Item id (a bare string's id is its 0-based item number). */
  id: string;
  /** Text to embed. */
  text: string;
  /** 1-based line number in the file. */
  line: number;
}

/**
 * Parses the JSONL text of an items file.
 *
 * @param text The file's text.
 * @param name The file's name, for messages.
 * @returns The items in file order; at least one.
 * @throws {UsageError} naming the line for a line that is not JSON, not a string nor an
 *   `{id, text}` object, or repeats an earlier id; for a file without items.
 */
export function parseItemsJsonl(text: string, name: string): FileItem[] {
  const items: FileItem[] = [];
  const seen = new Map<string, number>();
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!;
    if (raw.trim() === "") continue;
    const line = i + 1;
    const where = `${name} line ${line}`;
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (err) {
      throw new UsageError(
        `Cannot read ${where}: not JSON (${err instanceof Error ? err.message : String(err)})`,
      );
    }
    const item = toItem(value, items.length, where);
    const earlier = seen.get(item.id);
    if (earlier !== undefined) {
      throw new UsageError(`Cannot read ${where}: id '${item.id}' already used on line ${earlier}`);
    }
    seen.set(item.id, line);
    items.push({ ...item, line });
  }
  if (items.length === 0) {
    throw new UsageError(`Cannot embed ${name}: the file holds no items`);
  }
  return items;
}

/**
 * Reads and parses an items file.
 *
 * @param path The `--file` path.
 * @returns The items in file order.
 * @throws {UsageError} when the file cannot be read, is not UTF-8, or has a bad line.
 */
export async function readItemsFile(path: string): Promise<FileItem[]> {
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (err) {
    throw new UsageError(
      `Cannot read --file '${path}': ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new UsageError(`Cannot read --file '${path}': not valid UTF-8`);
  }
  return parseItemsJsonl(text, path);
}

function toItem(value: unknown, index: number, where: string): { id: string; text: string } {
  if (typeof value === "string") return { id: String(index), text: value };
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError(
      `Cannot read ${where}: give {"id": ..., "text": "..."} or a JSON string`,
    );
  }
  const rec = value as Record<string, unknown>;
  const extra = Object.keys(rec).find((k) => k !== "id" && k !== "text");
  if (extra !== undefined) {
    throw new UsageError(`Cannot read ${where}: unknown field '${extra}' (give only id and text)`);
  }
  const { id, text } = rec;
  if (typeof id !== "string" && !(typeof id === "number" && Number.isInteger(id))) {
    throw new UsageError(`Cannot read ${where}: field 'id' must be a string or an integer`);
  }
  if (typeof text !== "string") {
    throw new UsageError(`Cannot read ${where}: field 'text' must be a string`);
  }
  return { id: String(id), text };
}
