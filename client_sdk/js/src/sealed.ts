/**
 * The sealed-delivery entry (package.json `exports["./sealed"]`): `Seal` for the `seal` option
 * of `TelemetryClient`, and the Oblivious HTTP pieces it is made of (docs/wire-format.md,
 * "Sealed batches"). Import it only where batches go sealed: the core entries carry none of it.
 */

export { KEY_CONFIG_TTL, Seal, type SealSettings, Sealer, isKeyProblem } from "./sealing.js";
export {
  type KeyConfig, PAD_CLASSES, type SealedRequest, chooseConfig, decodeKeyConfigs, innerRequest, openResponse,
  paddedLength, sealRequest,
} from "./ohttp.js";
