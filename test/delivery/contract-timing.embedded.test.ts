import { contractTiming } from './contract-timing';

contractTiming('embedded');
