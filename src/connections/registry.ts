/**
 * The publish registry: every toolkit the service knows, in one place. Only
 * "connectable" toolkits can start a connection; everything else, and every slug not
 * listed here (decentralized microblogging, local business listings, ...), gives
 * CAPABILITY_UNSUPPORTED.
 */
export type ToolkitStatus = 'connectable' | 'disabled' | 'gated';

export interface ToolkitEntry {
  slug: string;
  name: string;
  status: ToolkitStatus;
  /** Why it cannot be connected; empty when it can. */
  reason: string;
  /** Account kinds that can be connected. */
  accountKinds: readonly string[];
}

export const PUBLISH_REGISTRY: readonly ToolkitEntry[] = [
  { slug: 'instagram', name: 'Instagram', status: 'connectable', reason: '', accountKinds: ['business', 'creator'] },
  { slug: 'facebook', name: 'Facebook Pages', status: 'connectable', reason: '', accountKinds: ['page'] },
  { slug: 'linkedin', name: 'LinkedIn', status: 'connectable', reason: '', accountKinds: ['profile'] },
  { slug: 'youtube', name: 'YouTube', status: 'connectable', reason: '', accountKinds: ['channel'] },
  {
    slug: 'twitter',
    name: 'X (Twitter)',
    status: 'disabled',
    reason: 'Published through a direct writer, not a managed OAuth connection; disabled until its review gate passes.',
    accountKinds: [],
  },
  {
    slug: 'tiktok',
    name: 'TikTok',
    status: 'gated',
    reason: 'The short-video lane refuses to publish; accounts cannot be connected yet.',
    accountKinds: [],
  },
  {
    slug: 'pinterest',
    name: 'Pinterest',
    status: 'gated',
    reason: 'The pinboard lane refuses to publish; accounts cannot be connected yet.',
    accountKinds: [],
  },
];

export function toolkitOf(slug: string): ToolkitEntry | undefined {
  return PUBLISH_REGISTRY.find((entry) => entry.slug === slug);
}

export function connectableToolkits(): string[] {
  return PUBLISH_REGISTRY.filter((entry) => entry.status === 'connectable').map((entry) => entry.slug);
}
