import { runAsProcess } from '../command-line';
import { main } from './cli';
import { PORTAL_COMMAND, portalSessionMain } from './portal-cli';

runAsProcess((argv, io) => (argv[0] === PORTAL_COMMAND ? portalSessionMain(argv.slice(1), io) : main(argv, io)));
