import { create } from '@bufbuild/protobuf';
import { timestampDate, timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import {
  PostSchema as PostMessageSchema,
  type ListPostsRequest,
  type Post as PostMessage,
  type PostService,
  type ReleaseHeldPostsRequest,
  type SchedulePostRequest,
} from '../gen/publishing/v1/post_service_pb';
import { requireCustomer } from '../auth';
import { auditedTransaction, noteAuditTarget } from '../audit';
import { ConnectionSchema, PostSchema, LAST_INSTANT_MS, LockMode, afterCursor, decodeCursor, entityManagerOf, isUuid, pageOf, pageSizeOf, type Post } from '../db';
import { apiError } from '../errors';
import type { EventPublisher } from '../events';
import { releaseHeldPosts } from './holds';

const MAX_TEXT_LENGTH = 5000;

/** Scheduled posts, as far as destinations need them: only verified destinations take them. */
export class PostServiceImpl implements ServiceImpl<typeof PostService> {
  constructor(
    private readonly now: () => number,
    /** Records `post.released` events in the transaction of the release. */
    private readonly events: Pick<EventPublisher, 'forChange'>,
  ) {}

  async schedulePost(req: SchedulePostRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const text = req.text.trim();
    if (!text || [...text].length > MAX_TEXT_LENGTH) {
      throw apiError('POST_TEXT_INVALID', `text is required and at most ${MAX_TEXT_LENGTH} characters.`);
    }
    if (!req.scheduledAt) throw apiError('POST_SCHEDULE_INVALID', 'scheduledAt is required.');
    const scheduledAt = timestampDate(req.scheduledAt);
    if (Number.isNaN(scheduledAt.getTime()) || scheduledAt.getTime() <= this.now()) {
      throw apiError('POST_SCHEDULE_INVALID', 'scheduledAt must be in the future.');
    }
    // proto3 JSON (and so REST) cannot express later instants, and the database refuses how they serialise.
    if (scheduledAt.getTime() > LAST_INSTANT_MS) {
      throw apiError('POST_SCHEDULE_INVALID', 'scheduledAt must be before the year 10000.');
    }
    const destination = isUuid(req.connectionId)
      ? await em.findOne(ConnectionSchema, { id: req.connectionId, organizationId: principal.organizationId })
      : null;
    if (!destination) throw apiError('CONNECTION_NOT_FOUND', `No connection ${req.connectionId.slice(0, 64)} in this organization.`);
    if (destination.status !== 'verified') {
      throw apiError('DESTINATION_NOT_VERIFIED', `Connection ${destination.id} is ${destination.status}; only a verified connection receives posts.`, {
        metadata: { status: destination.status },
      });
    }
    const post = em.create(PostSchema, {
      organizationId: principal.organizationId,
      connectionId: destination.id,
      text,
      scheduledAt,
      status: 'scheduled',
    });
    await em.flush();
    return { post: toMessage(post) };
  }

  async listPosts(req: ListPostsRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    const limit = pageSizeOf(req.pageSize);
    const cursor = decodeCursor(req.pageToken);
    if (req.status && req.status !== 'scheduled' && req.status !== 'held') {
      throw apiError('INVALID_ARGUMENT', 'status must be "scheduled" or "held".');
    }
    if (req.connectionId && !isUuid(req.connectionId)) return { posts: [], nextPageToken: '' };
    const rows = await em.find(
      PostSchema,
      {
        organizationId: principal.organizationId,
        ...(req.connectionId ? { connectionId: req.connectionId } : {}),
        ...(req.status ? { status: req.status as Post['status'] } : {}),
        ...afterCursor('scheduledAt', cursor, 'desc'),
      },
      { orderBy: { scheduledAt: 'desc', id: 'asc' }, limit: limit + 1 },
    );
    const { page, nextPageToken } = pageOf(rows, limit, (p) => p.scheduledAt);
    return { posts: page.map(toMessage), nextPageToken };
  }

  async releaseHeldPosts(req: ReleaseHeldPostsRequest, ctx: HandlerContext) {
    const principal = requireCustomer(ctx);
    const em = entityManagerOf(ctx);
    noteAuditTarget(ctx, req.connectionId);
    const events = this.events.forChange();
    const releasedPosts = await auditedTransaction(ctx, em, async (tx) => {
      // Locked until commit: a disable or reconnect in between must not see its holds undone.
      const destination = isUuid(req.connectionId)
        ? await tx.findOne(ConnectionSchema, { id: req.connectionId, organizationId: principal.organizationId }, { lockMode: LockMode.PESSIMISTIC_WRITE })
        : null;
      if (!destination) throw apiError('CONNECTION_NOT_FOUND', `No connection ${req.connectionId.slice(0, 64)} in this organization.`);
      if (destination.status !== 'verified') {
        throw apiError('DESTINATION_NOT_VERIFIED_FOR_RELEASE', 'Held posts are released only to a verified connection; confirm it first.', {
          metadata: { status: destination.status },
        });
      }
      const released = await releaseHeldPosts(tx, destination.id, new Date(this.now()), events);
      noteAuditTarget(ctx, destination.id, { releasedPosts: released });
      return released;
    });
    await events.committed();
    return { releasedPosts };
  }
}

function toMessage(p: Post): PostMessage {
  return create(PostMessageSchema, {
    id: p.id,
    connectionId: p.connectionId,
    text: p.text,
    scheduledAt: timestampFromDate(p.scheduledAt),
    status: p.status,
    holdReason: p.holdReason ?? '',
    heldAt: p.heldAt ? timestampFromDate(p.heldAt) : undefined,
    createdAt: timestampFromDate(p.createdAt),
  });
}
