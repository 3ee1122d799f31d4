import { runAsProcess } from '../command-line';
import { main } from './cli';

runAsProcess(main);
