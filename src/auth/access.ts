import { getOption, type DescMethod } from '@bufbuild/protobuf';
import { access, type AccessRule } from '../gen/publishing/v1/access_pb';

const rules = new WeakMap<DescMethod, AccessRule>();

/**
 * The RPC's `access` option (permission and audit action). Read from the descriptor once
 * per method: getOption decodes the option anew on every call, and the auth and audit
 * interceptors ask on every call.
 */
export function accessOf(method: DescMethod): AccessRule {
  let rule = rules.get(method);
  if (!rule) {
    rule = getOption(method, access);
    rules.set(method, rule);
  }
  return rule;
}
