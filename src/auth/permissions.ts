import type { Role } from '../db';

/** Permissions a key can be scoped to and a role can grant. */
export const PERMISSIONS = [
  'connections:read',
  'connections:manage',
  'posts:read',
  'posts:write',
  'webhooks:write',
] as const;
export type Permission = (typeof PERMISSIONS)[number];

/**
 * What each role may do. A call needs the permission in both the key's scopes and the
 * role's grants, so a narrow key can never do more than its owner's role allows.
 * Members manage connections, but confirming a changed account takes an owner or admin.
 */
export const ROLE_PERMISSIONS: Record<Role, readonly Permission[]> = {
  owner: PERMISSIONS,
  admin: PERMISSIONS,
  member: ['connections:read', 'connections:manage', 'posts:read', 'posts:write'],
  viewer: ['connections:read', 'posts:read'],
};

export function isPermission(value: string): value is Permission {
  return (PERMISSIONS as readonly string[]).includes(value);
}

/** Roles that may confirm an account that differs from the one confirmed before. */
export function canConfirmChangedAccount(role: Role): boolean {
  return role === 'owner' || role === 'admin';
}
