import assert from "node:assert/strict";
import { lineColumn } from "../lib/line_column.ts";

Deno.test("lineColumn() counts 1-based lines at LF and 1-based columns from the line's start", () => {
  const text = '{\n  "a": 1,\r\n  "b" 2\n}';
  assert.deepEqual(lineColumn(text, 0), { line: 1, column: 1 });
  assert.deepEqual(lineColumn(text, 1), { line: 1, column: 2 }, "the LF itself ends line 1");
  assert.deepEqual(lineColumn(text, 2), { line: 2, column: 1 });
  assert.deepEqual(lineColumn(text, text.indexOf("\r")), { line: 2, column: 10 });
  assert.deepEqual(lineColumn(text, text.indexOf("2")), { line: 3, column: 7 });
});

Deno.test("lineColumn() counts UTF-16 units and goes on past the end on the last line", () => {
  assert.deepEqual(lineColumn("😀x", 2), { line: 1, column: 3 });
  assert.deepEqual(lineColumn("ab\ncd", 9), { line: 2, column: 7 });
  assert.deepEqual(lineColumn("", 0), { line: 1, column: 1 });
});
