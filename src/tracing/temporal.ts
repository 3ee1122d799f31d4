import type { ClientInterceptors } from '@temporalio/client';
// The package's parts by path: its index also loads the plugin, and with it the whole worker SDK.
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry/lib/client';
import {
  makeWorkflowExporter,
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/worker';
import type { WorkerOptions } from '@temporalio/worker';
import { activeTracing } from './state';

/**
 * Temporal's own OpenTelemetry interceptors: the trace goes from the workflow start through
 * Temporal's headers into the workflow (`RunWorkflow:deliverWebhook`), each activity it
 * schedules (`StartActivity:attemptDelivery`) and each execution of it on a worker
 * (`RunActivity:attemptDelivery`, one per retry), whichever process runs them.
 */

/** The workflow interceptor modules; they must be in the workflow bundle (bundleWorkflowCode's workflowInterceptorModules). */
export const WORKFLOW_TRACING_MODULES: readonly string[] = [require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors')];

/** For the Temporal client that starts and signals deliveries; none with tracing off. */
export function temporalClientInterceptors(): ClientInterceptors | undefined {
  return activeTracing() ? { workflow: [new OpenTelemetryWorkflowClientInterceptor()] } : undefined;
}

/**
 * What a delivery worker adds to its options: the activity interceptors, the sink the
 * workflows' spans leave their sandbox by, and, for a worker that bundles the workflow code
 * itself (`workflowsPath`), the workflow interceptor modules. A worker given a prebuilt bundle
 * needs one built with WORKFLOW_TRACING_MODULES. Nothing with tracing off.
 */
export function workerTracing(options: { prebuiltBundle: boolean }): Pick<WorkerOptions, 'interceptors' | 'sinks'> {
  const tracing = activeTracing();
  if (!tracing) return {};
  return {
    interceptors: {
      activity: [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) })],
      ...(!options.prebuiltBundle && { workflowModules: [...WORKFLOW_TRACING_MODULES] }),
    },
    sinks: { exporter: makeWorkflowExporter(tracing.processor, tracing.resource) },
  };
}
