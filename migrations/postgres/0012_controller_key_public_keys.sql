-- Cloudly store, PostgreSQL: the public key of each recorded Ed25519 controller key, so that a
-- signing key retired by `cloudly keys rotate` stays listed by `getControllerSigningKeys` (and
-- earlier signatures still verify) after its private key is gone.
--
-- Unpadded base64url of the raw 32 bytes (43 characters), for the `identity` and `signing` roles;
-- never a private key. A record written before this migration has none until a controller with
-- that key starts (it records the public key of each key it checks).
ALTER TABLE controller_keys ADD COLUMN public_key TEXT CHECK (public_key IS NULL OR length(public_key) = 43);
