import { getOption, type DescField, type DescMethod } from '@bufbuild/protobuf';
import { http } from '../../gen/google/api/annotations_pb';

/**
 * A method's `google.api.http` rule, read once for both readers of it: the REST gateway
 * (which serves it) and the OpenAPI generator (which describes it), so the two cannot
 * disagree on what is served.
 */
export interface HttpRule {
  /** Upper-case HTTP verb. */
  verb: string;
  /** The rule's path template as written, e.g. `/api/v1/webhooks/{id}`. */
  template: string;
  /** The template split on `/`: literal segments, or the request field a `{name}` segment binds. */
  segments: (string | DescField)[];
  /** The request fields bound by path variables, in order. */
  pathFields: DescField[];
  /** `body: "*"`: the whole request is the JSON body; otherwise unbound fields come from the query. */
  bodyAll: boolean;
}

/**
 * Simple verbs with single-segment variables (`{name}` or `{name=*}`) only: custom verbs,
 * additional bindings and multi-segment patterns are not served; null when the method has
 * no rule.
 */
export function httpRuleOf(method: DescMethod): HttpRule | null {
  const rule = getOption(method, http);
  const { case: verb, value } = rule.pattern;
  if (!verb || verb === 'custom' || typeof value !== 'string') return null;
  const segments = value.split('/').map((segment) => {
    const variable = /^\{([a-z_][a-z0-9_.]*)(?:=\*)?\}$/.exec(segment);
    if (!variable) return segment;
    const field = method.input.fields.find((f) => f.name === variable[1]);
    if (!field) throw new Error(`${method.name}: path variable ${variable[1]} is not a field of the request`);
    return field;
  });
  return {
    verb: verb.toUpperCase(),
    template: value,
    segments,
    pathFields: segments.filter((s): s is DescField => typeof s !== 'string'),
    bodyAll: rule.body === '*',
  };
}
