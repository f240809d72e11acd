"""The Kubernetes API: the client, watches, and each resource the service reads or writes.

- ``client``: an API client with timeouts, and the adapter's errors for what the API answers.
- ``watch``: list-then-watch of one resource type, kept alive forever.
- ``access`` and ``auth``: the service's own standing (preflight), and delegated authentication and
  authorisation as aggregated API servers do it.
- ``leases``: leader election on a Lease; ``shard_leases``: one Lease per shard, balanced across replicas.
- ``gpuforecasts``: GPUForecast objects, written and watched; ``capacity_buffers``: CapacityBuffers and
  the PodTemplates of their chunks.
- ``cronjobs``: known future GPU demand from CronJobs (and declared windows); ``cron_schedule``: a
  cron schedule's fire times, as the CronJob controller computes them.
- ``pending_pods``: Pending GPU pods, resolved to the NodePool Karpenter would launch them in;
  ``pod_outcomes``: what happened to a pod, as its JSON tells.
- ``pool_matching``: which Karpenter NodePool a pod's GPUs land in; ``node_requirements``: node label
  requirements as Karpenter reasons about them.
- ``gpu_requests``: GPU requests in pod specs and Kubernetes quantities; ``dra_claims`` and
  ``dra_devices``: GPUs asked for through Dynamic Resource Allocation; ``dra_allocations``: the GPUs
  DRA devices hold and allocated claims use in each pool now.
- ``nodeclaims``: provisioning lead times from Karpenter NodeClaims; ``nodeclaim_states``: one
  NodeClaim read as a launch; ``launch_record``: each pool's failed and slow launches.
- ``resourcelimits``: ceilings on GPUs: NodePool ``spec.limits`` and namespace ResourceQuotas.
"""
