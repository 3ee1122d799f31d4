import { Migration } from '@mikro-orm/migrations';

/**
 * The initial schema. Authored as SQL because what matters most here cannot be said in
 * entity metadata: uniqueness rules that must hold under concurrency, partial indexes
 * for the delivery queue, and a trigger that makes the audit trail append-only.
 */
export class Migration20261121000000Initial extends Migration {
  override name = 'Migration20261121000000Initial';

  override up(): void {
    this.addSql(`
create table organizations (
  id uuid primary key,
  name text not null,
  plan text not null check (plan in ('starter', 'agency', 'scale', 'command', 'enterprise')),
  monthly_delivery_quota bigint check (monthly_delivery_quota >= 0),
  created_at timestamptz not null,
  updated_at timestamptz not null
);`);
    this.addSql(`
create table users (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  email text not null,
  role text not null check (role in ('owner', 'admin', 'member', 'viewer')),
  created_at timestamptz not null,
  updated_at timestamptz not null,
  unique (organization_id, email),
  unique (id, organization_id)
);`);
    this.addSql(`
create table api_keys (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  user_id uuid not null,
  name text not null,
  prefix text not null,
  key_hash text not null unique,
  scopes text[] not null,
  revoked_at timestamptz,
  last_used_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  -- A key acts for one user in one organization; the database holds the two together.
  foreign key (user_id, organization_id) references users (id, organization_id)
);`);
    // One social account can be connected once, across all organizations: the unique
    // index is the rule, so two concurrent completions cannot both win.
    this.addSql(`
create table destinations (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  toolkit text not null,
  status text not null check (status in ('connected', 'verified', 'held', 'disconnected')),
  connected_account_ref text not null,
  account_id text not null,
  account_kind text not null,
  display_name text not null,
  handle text not null,
  avatar_url text not null,
  confirmed_account_id text,
  verified_at timestamptz,
  disconnected_at timestamptz,
  disable_reason text,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  constraint destinations_account_unique unique (toolkit, account_id)
);`);
    this.addSql(`create index destinations_organization_idx on destinations (organization_id, created_at, id);`);
    this.addSql(`
create table connection_attempts (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  user_id uuid not null references users (id),
  toolkit text not null,
  destination_id uuid references destinations (id),
  expires_at timestamptz not null,
  completed_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null
);`);
    this.addSql(`
create table posts (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  destination_id uuid not null references destinations (id),
  text text not null,
  scheduled_at timestamptz not null,
  status text not null check (status in ('scheduled', 'held')),
  hold_reason text,
  held_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null
);`);
    this.addSql(`create index posts_destination_status_idx on posts (destination_id, status);`);
    this.addSql(`create index posts_organization_idx on posts (organization_id, scheduled_at desc, id);`);
    this.addSql(`
create table webhook_endpoints (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  url text not null,
  description text not null,
  event_names text[] not null,
  secret_key_id text not null,
  secret_ciphertext bytea not null,
  disabled_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null
);`);
    this.addSql(`create index webhook_endpoints_organization_idx on webhook_endpoints (organization_id, created_at, id);`);
    // A retried event adds attempts to its one delivery; the unique index makes a
    // duplicate start of the same (endpoint, event) impossible, not just unlikely.
    this.addSql(`
create table webhook_deliveries (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  endpoint_id uuid not null references webhook_endpoints (id),
  event_id text not null,
  event_type text not null,
  payload text not null,
  status text not null check (status in ('pending', 'retrying', 'held', 'delivered', 'dead_lettered', 'failed')),
  attempt_count integer not null default 0 check (attempt_count >= 0 and attempt_count <= 8),
  next_attempt_at timestamptz,
  last_error text,
  last_response_status integer,
  workflow_id text not null,
  lease_until timestamptz,
  delivered_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  constraint webhook_deliveries_event_unique unique (endpoint_id, event_id)
);`);
    // The list route reads the five newest deliveries per endpoint; this keeps that
    // read flat however long the history grows.
    this.addSql(`create index webhook_deliveries_recent_idx on webhook_deliveries (endpoint_id, created_at desc, id desc);`);
    this.addSql(`
create index webhook_deliveries_due_idx on webhook_deliveries (next_attempt_at)
  where status in ('pending', 'retrying', 'held');`);
    // One row per attempt number: two instances can never both make attempt N.
    this.addSql(`
create table delivery_attempts (
  delivery_id uuid not null references webhook_deliveries (id),
  attempt integer not null check (attempt between 1 and 8),
  started_at timestamptz not null,
  finished_at timestamptz,
  response_status integer,
  error text,
  primary key (delivery_id, attempt)
);`);
    this.addSql(`
create table dead_letters (
  delivery_id uuid primary key references webhook_deliveries (id),
  organization_id uuid not null references organizations (id),
  endpoint_id uuid not null references webhook_endpoints (id),
  last_error text,
  created_at timestamptz not null
);`);
    this.addSql(`create index dead_letters_organization_idx on dead_letters (organization_id, created_at desc);`);
    this.addSql(`
create table delivery_usage (
  organization_id uuid not null references organizations (id),
  month date not null,
  deliveries bigint not null,
  primary key (organization_id, month)
);`);
    // Shape required by rate-limiter-flexible's Postgres store; counters shared by every instance.
    this.addSql(`
create table rate_limits (
  key varchar(255) primary key,
  points integer not null default 0,
  expire bigint
);`);
    // scope is 'global' or an organization id.
    this.addSql(`
create table kill_switches (
  scope text primary key,
  enabled boolean not null,
  reason text not null,
  updated_at timestamptz not null
);`);
    this.addSql(`
create table audit_events (
  id bigint generated always as identity primary key,
  occurred_at timestamptz not null default now(),
  organization_id uuid,
  actor_user_id uuid,
  api_key_id uuid,
  action text not null,
  target_id text,
  outcome text not null check (outcome in ('succeeded', 'refused', 'failed')),
  reason text,
  request_id text,
  details jsonb not null default '{}'
);`);
    this.addSql(`create index audit_events_organization_idx on audit_events (organization_id, occurred_at desc, id desc);`);
    this.addSql(`create index audit_events_action_idx on audit_events (action, occurred_at desc);`);
    // The audit trail is evidence: the database itself refuses to change or remove it.
    this.addSql(`
create function audit_events_append_only() returns trigger language plpgsql as $$
begin
  raise exception 'audit_events is append-only' using errcode = 'insufficient_privilege';
end;
$$;`);
    this.addSql(`
create trigger audit_events_no_update_or_delete before update or delete on audit_events
  for each row execute function audit_events_append_only();`);
    this.addSql(`
create trigger audit_events_no_truncate before truncate on audit_events
  for each statement execute function audit_events_append_only();`);
  }

  override down(): void {
    for (const table of [
      'audit_events', 'rate_limits', 'kill_switches', 'delivery_usage', 'dead_letters', 'delivery_attempts',
      'webhook_deliveries', 'webhook_endpoints', 'posts', 'connection_attempts', 'destinations',
      'api_keys', 'users', 'organizations',
    ]) {
      this.addSql(`drop table if exists ${table} cascade;`);
    }
    this.addSql('drop function if exists audit_events_append_only();');
  }
}
