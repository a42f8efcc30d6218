-- wrk script: PPN heartbeats of NODES simulated nodes (default 10,000), cycled in order, each
-- body as PPN's own agent (`service-vm-host`) serializes its NodeHeartbeat: PPN's fields only,
-- in its order, one running VM named as PPN's agent names them (`{vm_type}-{unix seconds}`). The
-- simulated nodes claim the loopback address, as `fleetwire loadgen`'s do: nothing is sent to them.
-- Used by tests/perf/compare_ppn.sh (docs/performance.md, "Against PPN's controller").
--
--   NODES=10000 wrk -t1 -c32 -d8s --latency -s tests/perf/ppn_heartbeats.lua http://127.0.0.1:9203

local nodes = tonumber(os.getenv("NODES") or "10000")
local requests = {}
local next_node = 0

function init(args)
  -- The agent stamps each heartbeat with its clock; one stamp for the run is enough here.
  local stamp = os.date("!%Y-%m-%dT%H:%M:%S") .. ".123456789Z"
  local headers = { ["Content-Type"] = "application/json" }
  for i = 0, nodes - 1 do
    local body = string.format(
      '{"node_id":"node-%05d","wg_ip":"127.0.0.1","hostname":"host-%05d",' ..
      '"ram_total_mb":65536,"ram_used_mb":%d,"cpu_cores":16,"cpu_load_pct":12.5,' ..
      '"kvm_available":%s,"reserved":false,"vms":[{"vm_id":"small-%d","vm_type":"small",' ..
      '"state":"Running","ram_alloc_mb":512,"vcpu_count":1,"started_at":"2026-11-30T09:00:00Z",' ..
      '"tenant_id":null,"host_ports":[{"host_port":20000,"guest_port":22,"protocol":"tcp"}]}],' ..
      '"boot_id":"9b2c1f0e-5d7a-4c3b-8e6f-0a1b2c3d4e5f","timestamp_utc":"%s"}',
      i, i, 8192 + i % 1024,
      (i % 2 == 0) and "true" or "false", 1764600000 + i, stamp)
    requests[i] = wrk.format("POST", "/v1/nodes/heartbeat", headers, body)
  end
end

function request()
  local r = requests[next_node]
  next_node = (next_node + 1) % nodes
  return r
end
