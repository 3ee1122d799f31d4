import { contractTiming } from './contract-timing';

contractTiming('temporal');
