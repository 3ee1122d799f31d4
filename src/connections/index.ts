export { ConnectionServiceImpl, type ConnectionServiceDeps } from './service';
export { StateSigner, STATE_TTL_MS } from './state';
export { PUBLISH_REGISTRY, toolkitOf, connectableToolkits } from './registry';
export { SandboxProvider, SANDBOX_ACCOUNTS, SANDBOX_PATH } from './providers/sandbox';
export { ComposioProvider } from './providers/composio';
export { ProviderError, type ConnectionProvider, type AccountIdentity } from './provider';
