import { api, type EventType } from './api';
import { Show, useLoad } from './ui';

export async function loadCatalog(): Promise<EventType[]> {
  return (await api<{ eventTypes?: EventType[] }>('GET', '/event-types')).eventTypes ?? [];
}

export function CatalogPage() {
  const [catalog, reload] = useLoad(loadCatalog, 'catalog');
  return (
    <>
      <h1>Event catalog</h1>
      <p>Every event an endpoint can subscribe to. Each delivery is a JSON body <code>{'{"id", "type", "createdAt", "data"}'}</code>; the schema below describes its <code>data</code>.</p>
      <Show loaded={catalog} what="the event catalog" retry={reload}>
        {(types) => (
          <div className="catalog">
            {types.map((type) => (
              <section key={type.name} aria-labelledby={`type-${type.name}`} className="card">
                <h2 id={`type-${type.name}`}>
                  <code>{type.name}</code>
                </h2>
                <p>{type.description}</p>
                <details>
                  <summary>Schema of data</summary>
                  <pre tabIndex={0} aria-label={`JSON Schema of ${type.name}`}>{JSON.stringify(type.schema, null, 2)}</pre>
                </details>
                <details>
                  <summary>Example data</summary>
                  <pre tabIndex={0} aria-label={`Example of ${type.name}`}>{JSON.stringify(type.example, null, 2)}</pre>
                </details>
              </section>
            ))}
          </div>
        )}
      </Show>
    </>
  );
}
