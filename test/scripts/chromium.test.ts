import os from 'node:os';
import path from 'node:path';
import { ensureChromium } from '../../scripts/chromium';

describe("the test command's Chromium (jest's global setup, .ci/run)", () => {
  it('stops at once with the exact command to run when the browser is missing and the user may not install it', () => {
    const missing = path.join(os.tmpdir(), `no-chromium-${process.pid}`, 'chromium');
    expect(() => ensureChromium({ path: missing, as: null })).toThrow(
      `${missing} is missing, and installing Debian's chromium needs root. Run:\n  sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends chromium'`,
    );
  });

  it('leaves a browser that is there as it is, whoever runs the tests', () => {
    expect(() => ensureChromium({ path: process.execPath, as: null })).not.toThrow();
  });
});
