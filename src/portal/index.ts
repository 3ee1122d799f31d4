export { PortalSessions, PORTAL_CAPABILITIES, COOKIE_NAME, csrfTokenOf, type PortalCapability, type SessionView } from './sessions';
export { PortalServiceImpl, START_PATH } from './service';
export { PortalPages, PORTAL_DIST, PORTAL_PATH } from './pages';
