// Drives a running Cloudly with the ecosystem's own client, @api.global/typedrequest 3.3.0:
// `new TypedRequest(url + '/typedrequest', method).fire(request)`, refusals as TypedResponseError.
// Usage: node check.mjs <base url> <admin identity file>. Prints one JSON line; exit 0 on success.
import { readFileSync } from 'node:fs';
import { TypedRequest, TypedResponseError } from '@api.global/typedrequest';

const [baseUrl, identityFile] = process.argv.slice(2);
const identity = JSON.parse(readFileSync(identityFile, 'utf8'));
const endpoint = `${baseUrl}/typedrequest`;
const fire = (method, request) => new TypedRequest(endpoint, method).fire(request);
const refusal = async (method, request) => {
  try {
    await fire(method, request);
  } catch (error) {
    if (error instanceof TypedResponseError) return { text: error.errorText, data: error.errorData };
    throw error;
  }
  throw new Error(`${method} was expected to be refused`);
};
// The client logs refusals with console.error; keep stdout for the result line.
console.error = () => {};

const keys = await fire('getControllerSigningKeys', {});
await fire('putOrganization', { identity, organization: { id: 'org', name: 'Org' } });
await fire('putCluster', { identity, expectedRevision: null, cluster: {
  id: 'c1', organizationId: 'org', runtime: { phase: 'pallet', generation: 1 },
  relayOrigin: 'https://relay.example.net', fleetCutoverIngressDesignation: null } });
const { spec } = await fire('putServiceRuntimeSpec', { identity, expectedRevision: null, spec: {
  clusterId: 'c1', serviceId: 'ingress', organizationId: 'org', image: 'registry.example/ingress:1',
  replicas: 1, placement: { nodeIds: ['node-1'] }, ports: [{ protocol: 'tcp', port: 443 }],
  environment: [], volumes: [] } });
const request = { mutationId: 'mut-client-1', clusterId: 'c1', ingressServiceId: 'ingress',
  currentRuntime: { id: 'c1', phase: 'pallet', generation: 1 },
  expectedSpecRevision: spec.revision, expectedDesignation: null };
const designated = await fire('designateClusterIngress', { identity, designation: request });
const replayed = await fire('designateClusterIngress', { identity, designation: request });
const current = await fire('getClusterIngressDesignation', { identity, clusterId: 'c1' });
const conflict = await refusal('designateClusterIngress', { identity, designation: { ...request, mutationId: 'mut-client-2' } });
const unknown = await refusal('noSuchMethod', {});
console.log(JSON.stringify({ keys, designated, replayed: replayed.replayed, current, conflict, unknown }));
