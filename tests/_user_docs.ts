/**
 * The user's documentation as one text: README.md, then every docs/*.md in name order. Tests that
 * run the documented examples, or use the docs as a corpus of real prose, read it here.
 *
 * @module
 */
import { ROOT } from "./_helpers.ts";

/**
 * README.md and every `docs/*.md`, joined by newlines (README first, then the docs by name).
 *
 * @returns The text.
 */
export async function userDocs(): Promise<string> {
  const docs: string[] = [];
  for await (const e of Deno.readDir(`${ROOT}/docs`)) {
    if (e.isFile && e.name.endsWith(".md")) docs.push(`${ROOT}/docs/${e.name}`);
  }
  const files = [`${ROOT}/README.md`, ...docs.sort()];
  return (await Promise.all(files.map((f) => Deno.readTextFile(f)))).join("\n");
}
