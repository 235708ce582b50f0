#!/usr/bin/env node
// Verifies asset event signature test vectors without any of the Python package's code:
// avsc decodes the envelope bytes with the .avsc schema, node's crypto computes HMAC-SHA256 over
// the version 2 signed bytes rebuilt from the decoded record as docs/asset-watcher.md / authz.py specify.
//
//   node tests/node/verify_signatures.js [--schema PATH] VECTOR.json|DIR ...
//
// Exit status 0 when every vector behaves as its "expect" says, 1 otherwise.
'use strict';

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const avro = require('avsc');

const RECIPE_V2 = 'airflow-kafka-events/asset-event-signature/v2';
const PREFIX_V2 = Buffer.from('v2:', 'ascii');
const NULL_ITEM = Buffer.from([0xff, 0xff, 0xff, 0xff]);
const DEFAULT_SCHEMA = path.join(
  __dirname, '..', '..', 'src', 'airflow_kafka_events', 'envelopes', 'schemas', 'asset_event_envelope', 'v1.avsc');

// Avro longs as BigInt: timestamps far from 1970 exceed 2^53.
const LongType = avro.types.LongType.__with({
  fromBuffer: (buf) => buf.readBigInt64LE(),
  toBuffer: (n) => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(BigInt(n));
    return buf;
  },
  fromJSON: BigInt,
  toJSON: Number,
  isValid: (n) => typeof n === 'bigint',
  compare: (a, b) => (a === b ? 0 : a < b ? -1 : 1),
});

// CRC-64-AVRO (Rabin) fingerprint, as the Avro specification defines it.
const EMPTY = 0xc15d213aa4d7a795n;
const FP_TABLE = (() => {
  const table = [];
  for (let i = 0n; i < 256n; i++) {
    let fp = i;
    for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n));
    table.push(fp);
  }
  return table;
})();

function crc64Avro(buf) {
  let fp = EMPTY;
  for (const byte of buf) fp = (fp >> 8n) ^ FP_TABLE[Number((fp ^ BigInt(byte)) & 0xffn)];
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(fp);
  return out;
}

function item(value) {
  if (value === null || value === undefined) return NULL_ITEM;
  const data = Buffer.from(String(value), 'utf8'); // numbers and BigInts: their decimal text
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  return Buffer.concat([length, data]);
}

function signedBytes(record) {
  const extra = Object.entries(record.extra).map(([k, v]) => [Buffer.from(k, 'utf8'), k, v]);
  extra.sort((a, b) => Buffer.compare(a[0], b[0])); // UTF-8 bytes, not JS (UTF-16) order
  const source = record.source;
  const items = [
    RECIPE_V2, record.event_id, record.asset.name, record.asset.uri,
    record.partition_key, record.partition_date, extra.length,
  ];
  for (const [, key, text] of extra) items.push(key, text);
  items.push(
    record.idempotency_key, source.kind, source.dag_id, source.run_id, source.task_id,
    source.map_index, source.try_number, source.producer, record.emitted_at, record.causation.length,
    ...record.causation);
  return Buffer.concat(items.map(item));
}

function unframe(data, vector, fingerprint) {
  if (data[0] === 0xc3 && data[1] === 0x01) {
    const fp = data.subarray(2, 10);
    if (!fp.equals(fingerprint)) {
      throw new Error(`single-object fingerprint ${fp.toString('hex')} is not the schema's ${fingerprint.toString('hex')}`);
    }
    return data.subarray(10);
  }
  if (data[0] === 0x00) {
    const id = data.readUInt32BE(1);
    if (id !== vector.confluent_schema_id) {
      throw new Error(`Confluent schema id ${id}, the vector names ${vector.confluent_schema_id}`);
    }
    return data.subarray(5);
  }
  throw new Error(`unknown framing, leading byte ${data[0]}`);
}

function check(vector, type, fingerprint) {
  const data = Buffer.from(vector.envelope_base64, 'base64');
  const record = type.fromBuffer(unframe(data, vector, fingerprint)); // throws on trailing bytes
  const signature = record.signature;
  if (!signature || signature.toString('hex') !== vector.signature_hex) {
    return 'the decoded signature field is not signature_hex';
  }
  if (vector.expect === 'legacy-v1') {
    return signature.length === 32 ? null : 'a version 1 signature is 32 bytes';
  }
  const payload = signedBytes(record);
  const key = Buffer.from(vector.key_hex, 'hex');
  const digest = crypto.createHmac('sha256', key).update(payload).digest();
  const matches = signature.length === 35 && signature.subarray(0, 3).equals(PREFIX_V2)
    && crypto.timingSafeEqual(signature.subarray(3), digest);
  if (vector.expect === 'valid') {
    if (!payload.equals(Buffer.from(vector.signed_bytes_base64, 'base64'))) return 'rebuilt signed bytes differ';
    return matches ? null : 'the signature does not verify';
  }
  if (vector.expect === 'invalid') return matches ? 'an altered envelope verified' : null;
  return `unknown expect ${JSON.stringify(vector.expect)}`;
}

function vectorFiles(args) {
  const files = [];
  for (const arg of args) {
    if (fs.statSync(arg).isDirectory()) {
      for (const name of fs.readdirSync(arg).sort()) if (name.endsWith('.json')) files.push(path.join(arg, name));
    } else {
      files.push(arg);
    }
  }
  return files;
}

function main(argv) {
  let schemaPath = DEFAULT_SCHEMA;
  const args = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--schema') schemaPath = argv[++i];
    else args.push(argv[i]);
  }
  const type = avro.Type.forSchema(JSON.parse(fs.readFileSync(schemaPath, 'utf8')), {registry: {long: LongType}});
  const fingerprint = crc64Avro(Buffer.from(JSON.stringify(type.schema()), 'utf8')); // parsing canonical form
  const files = vectorFiles(args);
  if (files.length === 0) {
    console.error('no vector files given');
    return 1;
  }
  let failed = 0;
  for (const file of files) {
    const vector = JSON.parse(fs.readFileSync(file, 'utf8'));
    let problem;
    try {
      problem = check(vector, type, fingerprint);
    } catch (err) {
      problem = `error: ${err.message}`;
    }
    if (problem) failed += 1;
    console.log(`${problem ? 'FAIL' : 'ok  '} ${vector.name} (${vector.expect})${problem ? ': ' + problem : ''}`);
  }
  console.log(`${files.length - failed}/${files.length} vectors as expected (avsc ${require('avsc/package.json').version}, node ${process.version})`);
  return failed ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));
