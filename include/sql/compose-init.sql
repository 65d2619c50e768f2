-- docker-compose only: a database and role for the offsets ledger, beside Airflow's metadata.
-- The ledger's tables are created and versioned by offsetbatch itself (offsetbatch.ledger.schema).
CREATE ROLE ledger LOGIN PASSWORD 'ledger';
CREATE DATABASE ledger OWNER ledger;
