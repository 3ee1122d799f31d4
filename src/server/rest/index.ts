export { RestGateway } from './gateway';
export { openApiDocument } from './openapi-route';
