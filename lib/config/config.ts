/**
 * The configuration area's former single module, kept as a re-export of its old API for
 * importers that still name it (bench/). New code imports from `loader.ts`, `types.ts`,
 * `defaults.ts` or `schema.ts` directly.
 *
 * @module
 */

export * from "./defaults.ts";
export * from "./loader.ts";
export type * from "./types.ts";
