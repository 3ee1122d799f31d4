import { main } from './cli';

// The exit code is set, not forced: the process ends once stdout has taken every byte, also into a pipe.
void main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env }).then((code) => {
  process.exitCode = code;
});
