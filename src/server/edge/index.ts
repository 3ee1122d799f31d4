export { createListener, clientWentAway, type Listener, type RequestHandler } from './listener';
export { sendError, writeBody, writeJson, type NodeResponse } from './http-answer';
