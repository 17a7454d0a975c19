-- One Kandev service's Postgres role, made or brought up to date in the
-- database psql is connected to, as a superuser (or the database's owner
-- with CREATEROLE). Idempotent: run it at every start, after a password
-- change, after `kandev export`.
--
-- psql variables, set before this file is read (scripts/postgres-roles and
-- deploy/compose/postgres-start.sh stream `\set` lines, then this file, on
-- psql's standard input, so no password is on a command line):
--   role      kandev_task_service, kandev_agent_manager, ...
--   schema    the service's schema: task_service, agent_manager, ...
--   password  the role's password (at least 16 characters)
--
-- What the role gets, and nothing else:
--   LOGIN with its password (SCRAM); no superuser, CREATEDB, CREATEROLE,
--   replication, BYPASSRLS, and no membership in any other role;
--   CONNECT on this database, and CREATE on it: each service runs
--   `CREATE SCHEMA IF NOT EXISTS <schema>` at start, and Postgres checks
--   that privilege even when the schema exists;
--   its schema, owned, with every table, sequence, view and function in it
--   (whoever made them: the superuser's `kandev export`, or the services
--   before they had roles of their own). No other role but the superuser
--   may use the schema; PUBLIC loses CONNECT and TEMP on the database.

\set ON_ERROR_STOP on

SELECT :{?role} AND :{?schema} AND :{?password} AS kandev_variables_set \gset
\if :kandev_variables_set
\else
  DO $$ BEGIN RAISE EXCEPTION 'roles.sql: set the psql variables role, schema and password'; END $$;
\endif
SELECT length(:'password') < 16 AS kandev_weak_password \gset
\if :kandev_weak_password
  DO $$ BEGIN RAISE EXCEPTION 'roles.sql: a service password must have at least 16 characters'; END $$;
\endif

-- The role.
SELECT format('CREATE ROLE %I', :'role')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
              'NOREPLICATION NOBYPASSRLS INHERIT PASSWORD %L', :'role', :'password') \gexec
SELECT format('REVOKE %I FROM %I', g.rolname, :'role')
  FROM pg_auth_members m
  JOIN pg_roles g ON g.oid = m.roleid
  JOIN pg_roles r ON r.oid = m.member
  WHERE r.rolname = :'role' \gexec

-- The database: only the services' roles (and superusers) connect.
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database()) \gexec
SELECT format('GRANT CONNECT, CREATE ON DATABASE %I TO %I', current_database(), :'role') \gexec
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- The schema and everything in it.
SELECT format('CREATE SCHEMA %I AUTHORIZATION %I', :'schema', :'role')
  WHERE NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = :'schema') \gexec
SELECT format('ALTER SCHEMA %I OWNER TO %I', :'schema', :'role') \gexec
SELECT format('REVOKE ALL ON SCHEMA %I FROM PUBLIC', :'schema') \gexec
-- Tables (with their indexes and the sequences their columns own), views,
-- sequences of their own.
SELECT format('ALTER %s %I.%I OWNER TO %I',
              CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                             WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE'
                             ELSE 'TABLE' END,
              n.nspname, c.relname, :'role')
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = :'schema'
    AND c.relkind IN ('r', 'p', 'S', 'v', 'm', 'f')
    AND pg_get_userbyid(c.relowner) <> :'role'
    AND NOT (c.relkind = 'S' AND EXISTS (
      SELECT FROM pg_depend d
      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
        AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))) \gexec
SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, :'role')
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = :'schema' AND pg_get_userbyid(p.proowner) <> :'role' \gexec
SELECT format('ALTER TYPE %I.%I OWNER TO %I', n.nspname, t.typname, :'role')
  FROM pg_type t
  JOIN pg_namespace n ON n.oid = t.typnamespace
  WHERE n.nspname = :'schema' AND t.typtype IN ('e', 'd', 'r')
    AND pg_get_userbyid(t.typowner) <> :'role' \gexec
