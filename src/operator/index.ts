export { OperatorServiceImpl, type OperatorServiceDeps } from './service';
