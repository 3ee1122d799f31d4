import { Migration } from '@mikro-orm/migrations';

/**
 * One name for one thing: the API has always called a connected account a connection,
 * and now the schema does too (it said destination). Renames keep the rows, the grants
 * and the foreign keys.
 */
export class Migration20261124110000ConnectionsTable extends Migration {
  override name = 'Migration20261124110000ConnectionsTable';

  override up(): void {
    this.addSql('alter table destinations rename to connections;');
    this.addSql('alter table connections rename constraint destinations_pkey to connections_pkey;');
    this.addSql('alter table connections rename constraint destinations_account_unique to connections_account_unique;');
    this.addSql('alter table connections rename constraint destinations_organization_id_fkey to connections_organization_id_fkey;');
    this.addSql('alter table connections rename constraint destinations_status_check to connections_status_check;');
    this.addSql('alter index destinations_organization_idx rename to connections_organization_idx;');
    this.addSql('alter table posts rename column destination_id to connection_id;');
    this.addSql('alter table posts rename constraint posts_destination_id_fkey to posts_connection_id_fkey;');
    this.addSql('alter index posts_destination_status_idx rename to posts_connection_status_idx;');
    this.addSql('alter table connection_attempts rename column destination_id to connection_id;');
    this.addSql('alter table connection_attempts rename constraint connection_attempts_destination_id_fkey to connection_attempts_connection_id_fkey;');
  }

  override down(): void {
    this.addSql('alter table connection_attempts rename constraint connection_attempts_connection_id_fkey to connection_attempts_destination_id_fkey;');
    this.addSql('alter table connection_attempts rename column connection_id to destination_id;');
    this.addSql('alter index posts_connection_status_idx rename to posts_destination_status_idx;');
    this.addSql('alter table posts rename constraint posts_connection_id_fkey to posts_destination_id_fkey;');
    this.addSql('alter table posts rename column connection_id to destination_id;');
    this.addSql('alter index connections_organization_idx rename to destinations_organization_idx;');
    this.addSql('alter table connections rename constraint connections_status_check to destinations_status_check;');
    this.addSql('alter table connections rename constraint connections_organization_id_fkey to destinations_organization_id_fkey;');
    this.addSql('alter table connections rename constraint connections_account_unique to destinations_account_unique;');
    this.addSql('alter table connections rename constraint connections_pkey to destinations_pkey;');
    this.addSql('alter table connections rename to destinations;');
  }
}
