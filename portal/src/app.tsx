import { useEffect, useRef, useState } from 'react';
import { loadSession, type PortalSession } from './api';
import { asApiError, ErrorNote, Loading, type Loaded } from './ui';
import { EndpointsPage } from './endpoints';
import { EndpointPage } from './endpoint';
import { DeliveryPage } from './delivery';
import { CatalogPage } from './catalog';

/** Routes live in the fragment: the page is one document, and nothing in the path reaches the server's logs. */
type Route =
  | { page: 'endpoints' }
  | { page: 'endpoint'; id: string }
  | { page: 'delivery'; id: string; deliveryId: string }
  | { page: 'catalog' };

function routeOf(hash: string): Route {
  const parts = hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'catalog') return { page: 'catalog' };
  if (parts[0] === 'endpoints' && parts[1] && parts[2] === 'deliveries' && parts[3]) return { page: 'delivery', id: parts[1], deliveryId: parts[3] };
  if (parts[0] === 'endpoints' && parts[1]) return { page: 'endpoint', id: parts[1] };
  return { page: 'endpoints' };
}

const REFUSALS: Record<string, string> = {
  PORTAL_TOKEN_USED: 'This link has been used already. Ask for a new one from the page that sent you here.',
  PORTAL_SESSION_EXPIRED: 'This link has expired. Ask for a new one from the page that sent you here.',
  PORTAL_SESSION_REVOKED: 'This access has been revoked.',
  PORTAL_SESSION_INVALID: 'This link is not valid.',
};

function applyTheme(theme: PortalSession['theme']): void {
  const style = document.documentElement.style;
  style.setProperty('--primary', theme.primaryColor);
  style.setProperty('--background', theme.backgroundColor);
  style.setProperty('--text', theme.textColor);
  document.title = `${theme.name} — webhooks`;
}

export function App() {
  const [session, setSession] = useState<Loaded<PortalSession>>({ state: 'loading' });
  const [route, setRoute] = useState<Route>(() => routeOf(window.location.hash));
  const heading = useRef<HTMLElement>(null);

  useEffect(() => {
    loadSession().then(
      (value) => {
        applyTheme(value.theme);
        setSession({ state: 'ready', value });
      },
      (error: unknown) => setSession({ state: 'error', error: asApiError(error) }),
    );
    const onHash = () => setRoute(routeOf(window.location.hash));
    window.addEventListener('hashchange', onHash);
    return () => window.removeEventListener('hashchange', onHash);
  }, []);

  // A new page takes the focus to its main landmark, so keyboard and screen-reader users start there.
  useEffect(() => {
    heading.current?.focus();
  }, [route]);

  const refused = new URLSearchParams(window.location.search).get('refused');
  if (session.state === 'loading') {
    return (
      <main id="main">
        <Loading what="your session" />
      </main>
    );
  }
  if (session.state === 'error') {
    return (
      <main id="main" className="page">
        <h1>Webhooks</h1>
        <p role="alert">{REFUSALS[refused ?? session.error.code] ?? REFUSALS[session.error.code] ?? 'You are not signed in to the webhook portal.'}</p>
        {session.error.status !== 401 && <ErrorNote error={session.error} />}
      </main>
    );
  }
  const value = session.value;
  const can = (capability: string) => value.capabilities.includes(capability);
  return (
    <>
      <a className="skip" href="#main" onClick={(event) => { event.preventDefault(); heading.current?.focus(); }}>
        Skip to content
      </a>
      <header className="banner">
        {value.theme.logoUrl && <img className="logo" src={value.theme.logoUrl} alt="" />}
        <span className="brand">{value.theme.name}</span>
        <nav aria-label="Portal">
          <a href="#/" aria-current={route.page !== 'catalog' ? 'page' : undefined}>
            Endpoints
          </a>
          <a href="#/catalog" aria-current={route.page === 'catalog' ? 'page' : undefined}>
            Event catalog
          </a>
        </nav>
      </header>
      <main id="main" className="page" tabIndex={-1} ref={heading}>
        {route.page === 'endpoints' && <EndpointsPage can={can} narrowed={value.endpointIds.length > 0} />}
        {route.page === 'endpoint' && <EndpointPage key={route.id} id={route.id} can={can} />}
        {route.page === 'delivery' && <DeliveryPage key={route.deliveryId} id={route.id} deliveryId={route.deliveryId} can={can} />}
        {route.page === 'catalog' && <CatalogPage />}
      </main>
      <footer className="footer">
        <p>
          Deliveries are at least once: a receiver may see an attempt twice, and should use the event id to tell.
        </p>
      </footer>
    </>
  );
}
