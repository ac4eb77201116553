#!/usr/bin/env bash
# Starts examples/kubernetes/elastic.yaml and ties the data group's lifetime
# to the training JobSet: the JobSet becomes the owner of the data Deployment
# and its Service, so Kubernetes deletes them when the finished JobSet is
# deleted (its ttlSecondsAfterFinished). The owner needs the JobSet's uid,
# which exists only once it is created: hence this script and not one file.
#
#   bash elastic.sh [NAMESPACE] [keda|hpa]
#
# With keda or hpa, the data group is also scaled by the platform's
# autoscaler to the trainers' leader's heterodl_data_hosts_needed (keda.yaml:
# a KEDA ScaledObject; hpa.yaml: the HPA through prometheus-adapter; both
# need monitoring.yaml's monitors applied, and are owned by the JobSet too).
# Without, size the data group by hand or from the measured need
# (docs/operations.md, "An elastic data group on Kubernetes"):
#   kubectl scale deployment/heterodl-data --replicas=6
#   heterodl status --data-servers-dns heterodl-data:50051 --demand 20000 --json   # sizing.hosts_needed
set -euo pipefail
cd "$(dirname "$0")"
namespace=${1:-default}
autoscaler=${2:-}
case $autoscaler in
  ""|keda|hpa) ;;
  *) echo "elastic.sh: the autoscaler is keda or hpa, not '$autoscaler'" >&2; exit 2 ;;
esac

kubectl -n "$namespace" apply -f elastic.yaml
uid=$(kubectl -n "$namespace" get jobset heterodl-train -o jsonpath='{.metadata.uid}')
owner=$(printf '{"metadata":{"ownerReferences":[{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","name":"heterodl-train","uid":"%s","blockOwnerDeletion":false}]}}' "$uid")
kubectl -n "$namespace" patch deployment heterodl-data --type merge -p "$owner"
kubectl -n "$namespace" patch service heterodl-data --type merge -p "$owner"
if [[ $autoscaler == keda ]]; then
  kubectl -n "$namespace" apply -f keda.yaml
  kubectl -n "$namespace" patch scaledobject heterodl-data --type merge -p "$owner"
elif [[ $autoscaler == hpa ]]; then
  kubectl apply -f hpa.yaml  # its adapter rule lives in the monitoring namespace
  kubectl -n "$namespace" patch horizontalpodautoscaler heterodl-data --type merge -p "$owner"
fi
echo "heterodl: training JobSet heterodl-train (uid $uid) owns the data group heterodl-data"
