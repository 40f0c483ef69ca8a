/**
 * The browser bundle with sealed delivery (dist/ldpt-sealed.min.js): the browser entry
 * (index.ts) plus `Seal` (sealed.ts). A page that does not seal loads dist/ldpt.min.js instead.
 */

export * from "./index.js";
export * from "./sealed.js";
