// Validates Kubernetes objects against the API's schemas (kubernetes-models, generated from
// the Kubernetes OpenAPI document). Reads a JSON array of objects on standard input; prints
// one line per object ("KIND NAME: valid" or the schema's complaint) and exits 1 if any is
// invalid or has no schema. Usage: node validate.js MODULES_DIR < objects.json
'use strict';
const path = require('path');
const fs = require('fs');

const modules = process.argv[2];
if (!modules) {
  console.error('usage: node validate.js MODULES_DIR < objects.json');
  process.exit(2);
}

function modelFor(apiVersion, kind) {
  const slash = apiVersion.indexOf('/');
  const sub = slash < 0 ? apiVersion : apiVersion.slice(0, slash) + '/' + apiVersion.slice(slash + 1);
  let mod;
  try {
    mod = require(path.join(modules, 'kubernetes-models', sub));
  } catch (e) {
    return null;
  }
  return mod[kind] || null;
}

const objects = JSON.parse(fs.readFileSync(0, 'utf8'));
let bad = 0;
for (const o of objects) {
  const name = `${o.kind} ${o.metadata && o.metadata.name}`;
  const Model = modelFor(o.apiVersion, o.kind);
  if (!Model) {
    console.log(`${name}: no schema for ${o.apiVersion} ${o.kind}`);
    bad++;
    continue;
  }
  try {
    new Model(o).validate();
    console.log(`${name}: valid`);
  } catch (e) {
    console.log(`${name}: ${e.message}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
