/** onnxruntime-node version pinned in package.json; part of the ORT engine identity. */
export const ORT_VERSION = "1.30.0";
