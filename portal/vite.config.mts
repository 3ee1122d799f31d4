import { defineConfig } from 'vite';

/**
 * The customer portal's build: React without a plugin (Vite compiles JSX itself), served
 * by the service under /portal/. No inline script or style is emitted, so the page runs
 * under the service's strict Content-Security-Policy.
 */
export default defineConfig({
  root: import.meta.dirname,
  base: '/portal/',
  logLevel: 'warn',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // The polyfill is an inline script; every browser the portal supports has modulepreload.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
