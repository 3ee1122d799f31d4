import { main } from './cli';
import { PORTAL_COMMAND, portalSessionMain } from './portal-cli';

const argv = process.argv.slice(2);
const io = { stdout: process.stdout, stderr: process.stderr, env: process.env };
const run = argv[0] === PORTAL_COMMAND ? portalSessionMain(argv.slice(1), io) : main(argv, io);
// The exit code is set, not forced: the process ends once stdout has taken every byte, also into a pipe.
void run.then((code) => {
  process.exitCode = code;
});
