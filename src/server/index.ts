export { build, start, type App, type BuiltApp, type BuildOptions } from './app';
export { PUBLIC_SERVICES } from './routes';
