import assert from "node:assert";
import { configHome, dataHome, envLookup, storePath, synapseDataDir } from "../lib/paths.ts";

const linux = { os: "linux" } as const;
const windows = { os: "windows" } as const;

Deno.test("envLookup() reads records and functions and treats empty as unset", () => {
  assert.strictEqual(envLookup({ A: "1", B: "" })("A"), "1");
  assert.strictEqual(envLookup({ A: "1", B: "" })("B"), undefined);
  assert.strictEqual(envLookup({})("A"), undefined);
  const fn = (
    name: string,
  ): string | undefined => (name === "X" ? "y" : name === "E" ? "" : undefined);
  assert.strictEqual(envLookup(fn)("X"), "y");
  assert.strictEqual(envLookup(fn)("E"), undefined);
});

Deno.test("dataHome() prefers XDG_DATA_HOME as-is, even relative", () => {
  assert.strictEqual(dataHome({ XDG_DATA_HOME: "/x/data/", HOME: "/home/u" }, linux), "/x/data/");
  assert.strictEqual(dataHome({ XDG_DATA_HOME: "rel", HOME: "/home/u" }, linux), "rel");
  assert.strictEqual(dataHome({ XDG_DATA_HOME: " /sp ", HOME: "/h" }, linux), " /sp ");
});

Deno.test("dataHome() treats an empty XDG_DATA_HOME as unset", () => {
  assert.strictEqual(
    dataHome({ XDG_DATA_HOME: "", HOME: "/home/u" }, linux),
    "/home/u/.local/share",
  );
});

Deno.test("dataHome() falls back to $HOME/.local/share, then .local/share", () => {
  assert.strictEqual(dataHome({ HOME: "/home/u" }, linux), "/home/u/.local/share");
  assert.strictEqual(dataHome({ HOME: "/home/u/" }, linux), "/home/u/.local/share");
  assert.strictEqual(dataHome({ HOME: "" }, linux), ".local/share");
  assert.strictEqual(dataHome({}, linux), ".local/share");
});

Deno.test("dataHome() follows the Windows APPDATA ladder on Windows only", () => {
  const env = {
    APPDATA: "C:\\Users\\u\\AppData\\Roaming",
    USERPROFILE: "C:\\Users\\u",
    HOME: "/h",
  };
  assert.strictEqual(dataHome(env, windows), "C:\\Users\\u\\AppData\\Roaming");
  assert.strictEqual(dataHome({ ...env, APPDATA: "" }, windows), "C:\\Users\\u\\AppData\\Roaming");
  assert.strictEqual(
    dataHome({ USERPROFILE: "C:\\Users\\v" }, windows),
    "C:\\Users\\v\\AppData\\Roaming",
  );
  assert.strictEqual(dataHome({ HOME: "/h" }, windows), "/h/.local/share");
  assert.strictEqual(dataHome({ XDG_DATA_HOME: "D:\\xdg", APPDATA: "C:\\a" }, windows), "D:\\xdg");
  assert.strictEqual(dataHome(env, linux), "/h/.local/share");
});

Deno.test("configHome() uses the same ladder with .config", () => {
  assert.strictEqual(configHome({ XDG_CONFIG_HOME: "/cfg", HOME: "/h" }, linux), "/cfg");
  assert.strictEqual(configHome({ XDG_CONFIG_HOME: "", HOME: "/h" }, linux), "/h/.config");
  assert.strictEqual(configHome({}, linux), ".config");
  assert.strictEqual(configHome({ APPDATA: "C:\\a", HOME: "/h" }, windows), "C:\\a");
  assert.strictEqual(configHome({ XDG_DATA_HOME: "/data", HOME: "/h" }, linux), "/h/.config");
});

Deno.test("synapseDataDir() trims trailing slashes of the data home", () => {
  assert.strictEqual(
    synapseDataDir({ XDG_DATA_HOME: "/x/data/" }, linux),
    "/x/data/cortexkit/synapse",
  );
  assert.strictEqual(
    synapseDataDir({ XDG_DATA_HOME: "/x/data//" }, linux),
    "/x/data/cortexkit/synapse",
  );
  assert.strictEqual(
    synapseDataDir({ HOME: "/home/u" }, linux),
    "/home/u/.local/share/cortexkit/synapse",
  );
  assert.strictEqual(synapseDataDir({}, linux), ".local/share/cortexkit/synapse");
});

Deno.test("storePath() is <data_home>/cortexkit/synapse/store.db", () => {
  assert.strictEqual(storePath({ XDG_DATA_HOME: "/x/" }, linux), "/x/cortexkit/synapse/store.db");
  assert.strictEqual(
    storePath({ HOME: "/home/u" }, linux),
    "/home/u/.local/share/cortexkit/synapse/store.db",
  );
});

Deno.test("storePath() reads the process environment by default", () => {
  const expected = storePath((name) => Deno.env.get(name));
  assert.strictEqual(storePath(), expected);
});
