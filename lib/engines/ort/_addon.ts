/**
 * The onnxruntime-node native addon: the one place it is imported (STYLE 2). Loaded only inside
 * the ORT lane's Worker thread, never on the main thread.
 *
 * @module
 */
import * as ort from "onnxruntime-node";

export { ort };
