/** How the customer portal is served: who may frame it, its session cookie, and its look. */
export interface PortalConfig {
  /** Origins allowed to put the portal in an iframe (CSP frame-ancestors); empty: only the service's own. */
  frameAncestors: string[];
  /** The session cookie's SameSite: Strict unless the portal is framed by another site (then None, over TLS). */
  cookieSameSite: 'Strict' | 'Lax' | 'None';
  theme: PortalTheme;
}

export interface PortalTheme {
  /** Shown in the header and the page title. */
  name: string;
  /** An https (or data:image) URL of the logo; empty for none. */
  logoUrl: string;
  /** CSS colours (#rgb or #rrggbb). */
  primaryColor: string;
  backgroundColor: string;
  textColor: string;
}

const ORIGIN = /^https?:\/\/[a-z0-9.-]+(:\d{1,5})?$/i;
const COLOUR = /^#([0-9a-f]{3}|[0-9a-f]{6})$/i;

/** Reads the PORTAL_* settings; adds what is wrong to `problems`. */
export function portalConfig(env: Readonly<Record<string, string | undefined>>, problems: string[]): PortalConfig {
  const frameAncestors = (env.PORTAL_FRAME_ANCESTORS ?? '').split(/[\s,]+/).filter(Boolean);
  for (const origin of frameAncestors) {
    if (!ORIGIN.test(origin)) problems.push(`PORTAL_FRAME_ANCESTORS takes origins such as https://app.example.com (got "${origin}")`);
  }
  const sameSite = env.PORTAL_COOKIE_SAME_SITE || 'Strict';
  if (sameSite !== 'Strict' && sameSite !== 'Lax' && sameSite !== 'None') problems.push('PORTAL_COOKIE_SAME_SITE must be Strict, Lax or None');
  const colour = (name: string, fallback: string): string => {
    const value = env[name] || fallback;
    if (!COLOUR.test(value)) problems.push(`${name} must be a colour such as #1a56db (got "${value}")`);
    return value;
  };
  const logoUrl = env.PORTAL_LOGO_URL ?? '';
  if (logoUrl && !/^https:\/\/[^\s"'<>]+$/.test(logoUrl) && !/^data:image\/(png|svg\+xml|jpeg|webp);base64,[A-Za-z0-9+/=]+$/.test(logoUrl)) {
    problems.push('PORTAL_LOGO_URL must be an https URL or a base64 data:image URL');
  }
  return {
    frameAncestors,
    cookieSameSite: sameSite as PortalConfig['cookieSameSite'],
    theme: {
      name: (env.PORTAL_NAME || 'Webhooks').slice(0, 80),
      logoUrl,
      primaryColor: colour('PORTAL_PRIMARY_COLOR', '#1a56db'),
      backgroundColor: colour('PORTAL_BACKGROUND_COLOR', '#ffffff'),
      textColor: colour('PORTAL_TEXT_COLOR', '#111827'),
    },
  };
}
