export { RestGateway } from './gateway';
export { openApiDocument } from './openapi-route';
export { httpRuleOf } from './http-rules';
