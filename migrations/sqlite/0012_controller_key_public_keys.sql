-- Cloudly store, embedded SQLite: the same column as migrations/postgres/0012.
ALTER TABLE controller_keys ADD COLUMN public_key TEXT CHECK (public_key IS NULL OR length(public_key) = 43);
