/**
 * Debian's Chromium, which the browser suites drive through playwright-core (no browser is
 * downloaded). The test command provisions it as it does Node and the Temporal server: jest's
 * global setup calls ensureChromium(), which installs Debian's package when the browser is
 * missing and the user may (root, or sudo without a password), and otherwise fails at once
 * with the command to run. `.ci/run` runs this file first, so a failed install is reported as
 * such: `scripts/with-node.sh tsx scripts/chromium.ts`.
 *
 * CHROMIUM_PATH names another browser binary (default /usr/bin/chromium, where Debian's
 * package puts it).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
// As root, in a closed network: no sandbox, and nothing that reaches out on its own.
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const UPDATE_ARGS = ['update'];
const INSTALL_ARGS = ['install', '-y', '--no-install-recommends', 'chromium'];
/** What a user who may not install is told to run. */
export const INSTALL_COMMAND = `sudo sh -c 'apt-get ${UPDATE_ARGS.join(' ')} && apt-get ${INSTALL_ARGS.join(' ')}'`;

/** Root, or sudo without a password: the ways the test command may install a package; null when it may not. */
function installer(): 'root' | 'sudo' | null {
  if (process.getuid?.() === 0) return 'root';
  try {
    execFileSync('sudo', ['-n', 'true'], { stdio: 'ignore' });
    return 'sudo';
  } catch {
    return null;
  }
}

/**
 * Makes sure the browser is there: installs Debian's chromium when it is missing and the user
 * may, else throws with the command to run. `as` is who installs (default: found out).
 */
export function ensureChromium(options: { path?: string; as?: 'root' | 'sudo' | null } = {}): void {
  const path = options.path ?? CHROMIUM_PATH;
  if (existsSync(path)) return;
  const as = options.as === undefined ? installer() : options.as;
  if (!as) throw new Error(`${path} is missing, and installing Debian's chromium needs root. Run:\n  ${INSTALL_COMMAND}`);
  console.error(`chromium: ${path} is missing; installing Debian's chromium`);
  const apt = (args: string[]) => {
    // Another run on the machine may be installing at the same moment: wait for its lock rather than fail.
    const command = ['apt-get', '-o', 'DPkg::Lock::Timeout=600', ...args];
    const [file, ...rest] = as === 'root' ? command : ['sudo', '-n', ...command];
    execFileSync(file!, rest, { stdio: ['ignore', process.stderr, process.stderr], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  };
  apt(UPDATE_ARGS);
  apt(INSTALL_ARGS);
  if (!existsSync(path)) throw new Error(`Debian's chromium is installed, but ${path} is still missing: CHROMIUM_PATH names another binary`);
}

if (require.main === module) {
  try {
    ensureChromium();
    console.error(`chromium: ${CHROMIUM_PATH}`);
  } catch (error) {
    console.error(`chromium: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  }
}
