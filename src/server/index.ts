export { start, PUBLIC_SERVICES, type App, type BuildOptions } from './app';
