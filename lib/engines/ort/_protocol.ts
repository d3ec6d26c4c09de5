/**
 * Messages between OrtThread (main-thread side, ort_thread.ts) and its Worker thread. Token ids
 * and outputs cross as transferable buffers, never as JSON arrays.
 *
 * @module
 */
import type { Pooling } from "./pooling.ts";

/** What a loaded session computes. */
export type OrtTask = "embed" | "rerank";

/** Main → worker. */
export type OrtRequest =
  | {
    type: "load";
    reqId: number;
    modelRef: string;
    path: string;
    task: OrtTask;
    pooling: Pooling;
    normalize: boolean;
    intraOpThreads: number;
    /** Let onnxruntime's intra-op threads spin between runs (faster alone, wasteful when threads share cores). */
    allowSpinning: boolean;
    /**
     * Give quiet runs a twin session whose threads never spin (see {@link OrtRequest}
     * `run.quiet`), created by the first quiet run.
     */
    quietTwin: boolean;
    /**
     * Nice value for the worker thread and the session threads it creates (0: leave them be).
     * Set once, before the worker's first session; see {@link OrtResponse} `loaded.priorityError`.
     */
    niceness: number;
    /** `[rows, seq]` shapes run once at load to size the memory arena. */
    warmupShapes: [number, number][];
  }
  | {
    type: "run";
    reqId: number;
    modelRef: string;
    /** Concatenated token ids of all rows. */
    ids: Int32Array;
    /** Concatenated segment ids, same length as ids. */
    typeIds: Int32Array;
    /** Tokens per row. */
    lengths: Int32Array;
    /** Run on the quiet twin (another thread is busy on the same cores); creates it if needed. */
    quiet: boolean;
  }
  | { type: "unload"; reqId: number; modelRef: string }
  /** Release every quiet twin (the next quiet run creates its model's twin again). */
  | { type: "releaseQuiet"; reqId: number }
  | { type: "shutdown"; reqId: number };

/** Worker → main. */
export type OrtResponse =
  | {
    type: "loaded";
    reqId: number;
    dims: number;
    inputNames: string[];
    outputNames: string[];
    coldLoadMs: number;
    /** onnxruntime sessions alive in the worker after this request. */
    sessions: number;
    /** Nice value the worker thread (and the session threads it created) runs at. */
    niceness: number;
    /** Why the requested nice value could not be set; the model loaded all the same. */
    priorityError?: string;
  }
  | {
    type: "result";
    reqId: number;
    /** Row-major `[rows, dims]` (embed) or `[rows]` scores (rerank). */
    data: Float32Array;
    dims: number;
    /** 1 where the row's output is non-finite. */
    nonFinite: Uint8Array;
    /** Milliseconds inside session.run (plus pooling). */
    runMs: number;
    /**
     * Where the worker's time went, ms: `[tensors, session.run, pooling]` (building the input
     * tensors, onnxruntime's run, pooling and normalising), for the per-stage benchmark.
     */
    stagesMs: [number, number, number];
    /** onnxruntime sessions alive in the worker after this request. */
    sessions: number;
  }
  | { type: "unloaded"; reqId: number; sessions: number }
  | { type: "error"; reqId: number; code: string; message: string };
