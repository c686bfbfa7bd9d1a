# Real nodes for tests/control-plane (sourced by it): kubelets built from the
# same Kubernetes source as the control plane, each with a containerd of its
# own (Debian's, with runc), the CNI bridge/host-local/loopback plugins, and a
# pause image built here. Everything a node makes is named after the control
# plane's id and recorded in DIR, so that `down` removes exactly that:
#
#   DIR/nodes/NAME/            containerd root, state and socket; kubelet root,
#                              config and certificates; CNI config and IPAM state
#   bridge bh<id>n<i>          one per node, 10.<net>.<i>.1/24, the pods' gateway:
#                              the host reaches every pod IP through it
#   cgroups /bulkhead-<id>-<node>  the kubelet's cgroupRoot, in every hierarchy
#   iptables nat PREROUTING    one DNAT (comment bulkhead-cp-<id>): the
#                              `kubernetes` Service IP to the API server, since
#                              no kube-proxy runs
#   sysctls                    the kernel tunables every kubelet sets on start
#                              (vm.overcommit_memory, kernel.panic, ...): saved
#                              first, put back by `down`
#
# The kubelets authenticate as the test admin (no node bootstrap here), serve
# their API on the node's bridge address with webhook authn/authz, and leave
# the host's iptables alone (makeIPTablesUtilChains: false).

# Every kubelet (1.20) writes these on start unless protectKernelDefaults.
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
SYSCTL_SAVED=/run/bulkhead-real-nodes/sysctls
SYSCTL_HOLDERS=/run/bulkhead-real-nodes/holders

install_node_packages() {
    local missing=()
    command -v containerd >/dev/null || missing+=(containerd)
    command -v runc >/dev/null || missing+=(runc)
    [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
    command -v iptables >/dev/null || missing+=(iptables)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v buildah >/dev/null || missing+=(buildah)
    command -v gcc >/dev/null || missing+=(gcc)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]} (real nodes)"
        apt_update_once
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
    fi
}

# plan_real_nodes COUNT: choose an id and free address ranges, make the bridges.
# Must run before the API server starts: it advertises the first bridge address.
plan_real_nodes() {
    local count=$1 i net
    CP_ID=$(basename "$DIR" | md5sum | cut -c1-6)
    echo "$CP_ID" >"$DIR/cp-id"
    # A /16 whose /24s no route uses yet (another control plane's, or the host's).
    local routes
    routes=$(ip route show)
    for net in $(shuf -i 200-249); do
        grep -q "^10\.$net\." <<<"$routes" || break
    done
    echo "$net" >"$DIR/pod-net"
    POD_NET=$net
    SERVICE_RANGE="10.$net.255.0/24"
    SERVICE_IP="10.$net.255.1"
    : >"$DIR/bridges"
    for ((i = 1; i <= count; i++)); do
        local br="bh${CP_ID}n$i"
        ip link add "$br" type bridge
        echo "$br" >>"$DIR/bridges"
        ip addr add "10.$net.$i.1/24" dev "$br"
        ip link set "$br" up
    done
    ADVERTISE_IP="10.$net.1.1"
    # Save the tunables the kubelets will change, once per machine: the first
    # control plane with real nodes saves them, the last one's `down` restores.
    mkdir -p "$SYSCTL_HOLDERS"
    if [ ! -f "$SYSCTL_SAVED" ]; then
        local s
        for s in "${KUBELET_SYSCTLS[@]}"; do echo "$s $(cat "/proc/sys/$s")"; done >"$SYSCTL_SAVED"
    fi
    echo "$DIR" >"$SYSCTL_HOLDERS/$CP_ID"
}

# The API server's extra flags with real nodes: it listens where pods reach
# it, and calls the kubelets (logs, exec) by their node IP with a client
# certificate of the test CA, which the kubelets trust.
real_node_apiserver_flags() {
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
        -keyout "$DIR/pki/kubelet-client.key" -out "$DIR/pki/kubelet-client.csr" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >"$DIR/pki/kubelet-client.ext"
    openssl x509 -req -in "$DIR/pki/kubelet-client.csr" -CA "$DIR/pki/ca.crt" -CAkey "$DIR/pki/ca.key" -CAcreateserial \
        -days 30 -extfile "$DIR/pki/kubelet-client.ext" -out "$DIR/pki/kubelet-client.crt" 2>/dev/null
    echo --bind-address 0.0.0.0 --advertise-address "$ADVERTISE_IP" --service-cluster-ip-range "$SERVICE_RANGE" \
        --kubelet-preferred-address-types InternalIP \
        --kubelet-client-certificate "$DIR/pki/kubelet-client.crt" --kubelet-client-key "$DIR/pki/kubelet-client.key"
}

# start_real_nodes COUNT: containerd + kubelet per node; returns once every node is Ready.
start_real_nodes() {
    local count=$1 i pause t0=$SECONDS
    pause=$("$(dirname "$0")/image" pause) || die "could not build the pause image"
    pause=${pause#pause=}
    iptables -t nat -A PREROUTING -d "$SERVICE_IP/32" -p tcp --dport 443 \
        -m comment --comment "bulkhead-cp-$CP_ID" -j DNAT --to-destination "$ADVERTISE_IP:$API_PORT"
    echo "-d $SERVICE_IP/32 -p tcp --dport 443 -m comment --comment bulkhead-cp-$CP_ID -j DNAT --to-destination $ADVERTISE_IP:$API_PORT" \
        >"$DIR/dnat-rule"
    for ((i = 1; i <= count; i++)); do
        start_node "real-$i" "$i" "$pause"
    done
    local name
    for ((i = 1; i <= count; i++)); do
        name=real-$i
        wait_for "kubelet-$name" 120 node_ready "$name"
        # The node lifecycle controller, which would lift this taint, stays off
        # so that fake nodes (no heartbeat) are not evicted.
        kubectl_admin taint nodes "$name" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
    done
    log "$count real node(s) Ready in $((SECONDS - t0))s"
}

node_ready() {
    [ "$(kubectl_admin get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

start_node() { # NAME INDEX PAUSE_REF
    local name=$1 i=$2 pause=$3
    local n="$DIR/nodes/$name" ip="10.$POD_NET.$i.1" br="bh${CP_ID}n$i"
    local cgroot="/bulkhead-$CP_ID-$name"
    mkdir -p "$n/cni/net.d" "$n/cni/ipam" "$n/kubelet" "$n/containerd"
    echo "$cgroot" >"$n/cgroup-root"
    local h
    for h in /sys/fs/cgroup/*/; do
        [ -d "$h" ] && [ ! -L "${h%/}" ] || continue
        mkdir -p "$h${cgroot#/}" 2>/dev/null || true
    done
    cat >"$n/containerd.toml" <<TOML
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
[grpc]
  address = "$n/containerd.sock"
[ttrpc]
  address = "$n/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # This VM refuses a lower oom_score_adj than its own: keep the
  # kubelet's values at or above containerd's.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni/net.d"
TOML
    cat >"$n/cni/net.d/10-bulkhead.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "bulkhead-$CP_ID-$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$br",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n/cni/ipam",
        "ranges": [[{"subnet": "10.$POD_NET.$i.0/24", "gateway": "$ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
CNI
    start "containerd-$name" containerd --config "$n/containerd.toml"
    wait_for "containerd-$name" 30 ctr -a "$n/containerd.sock" version
    "$(dirname "$0")/image" import-one "$n/containerd.sock" "$pause" >/dev/null

    local kport hport
    kport=$(free_port); hport=$(free_port)
    cat >"$n/kubelet.yaml" <<KC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $kport
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failSwapOn: false
makeIPTablesUtilChains: false
podCIDR: 10.$POD_NET.$i.0/24
resolvConf: /etc/resolv.conf
maxPods: 110
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
KC
    start "kubelet-$name" "$BIN_DIR/kubelet" \
        --config "$n/kubelet.yaml" \
        --kubeconfig "$DIR/admin.kubeconfig" \
        --container-runtime remote --container-runtime-endpoint "unix://$n/containerd.sock" \
        --runtime-request-timeout 2m \
        --root-dir "$n/kubelet" --cert-dir "$n/kubelet/pki" \
        --hostname-override "$name" --node-ip "$ip" \
        --node-labels "test.bulkhead.dev/real-node=true,topology.kubernetes.io/zone=zone-$(( (i - 1) % 3 ))" \
        --pod-infra-container-image "$pause" \
        --v 1
}

# stop_real_nodes DIR: kubelets, then every pod sandbox's network namespace and
# container, then containerd, mounts, cgroups, bridges, the DNAT rule and the
# kernel tunables; only what DIR records.
stop_real_nodes() {
    local dir=$1 n name sock pid uid
    [ -d "$dir/nodes" ] || return 0
    for n in "$dir"/nodes/*/; do
        name=$(basename "$n")
        stop_pid "$dir/kubelet-$name.pid"
        # The kubelet (1.20) keeps container logs in /var/log/pods, outside
        # DIR: remove those of the pods it ran (its pods/ dir names their uids).
        for uid in $(ls "$n/kubelet/pods" 2>/dev/null); do
            rm -rf /var/log/pods/*_"$uid"
            find /var/log/containers -maxdepth 1 -type l -lname "/var/log/pods/*_$uid/*" -delete 2>/dev/null || true
        done
    done
    for n in "$dir"/nodes/*/; do
        name=$(basename "$n")
        sock="$n/containerd.sock"
        if [ -S "$sock" ] && [ -f "$dir/containerd-$name.pid" ] && kill -0 "$(cat "$dir/containerd-$name.pid")" 2>/dev/null; then
            remove_containers "$sock"
        fi
        stop_pid "$dir/containerd-$name.pid"
    done
    # Mounts below DIR (pod volumes, container root filesystems), deepest first.
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    for n in "$dir"/nodes/*/; do
        [ -f "$n/cgroup-root" ] || continue
        remove_cgroup "$(cat "$n/cgroup-root")"
    done
    if [ -f "$dir/bridges" ]; then
        local br
        while read -r br; do ip link del "$br" 2>/dev/null || true; done <"$dir/bridges"
    fi
    if [ -f "$dir/dnat-rule" ]; then
        # shellcheck disable=SC2046
        iptables -t nat -D PREROUTING $(cat "$dir/dnat-rule") 2>/dev/null || true
    fi
    if [ -f "$dir/cp-id" ]; then
        rm -f "$SYSCTL_HOLDERS/$(cat "$dir/cp-id")"
        restore_sysctls_if_last
    fi
}

stop_pid() { # PIDFILE
    [ -f "$1" ] || return 0
    local pid
    pid=$(cat "$1")
    kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}

# remove_containers SOCK: kill every task of that containerd, delete the
# network namespaces its pod sandboxes were given, then the containers.
remove_containers() {
    local sock=$1 id ns
    local c=(ctr -a "$sock" -n k8s.io)
    for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
        "${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $("${c[@]}" containers ls -q 2>/dev/null); do
        ns=$("${c[@]}" containers info "$id" 2>/dev/null \
            | jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null || true)
        case $ns in
            /var/run/netns/* | /run/netns/*)
                umount "$ns" 2>/dev/null || true
                rm -f "$ns"
                ;;
        esac
        "${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
        "${c[@]}" containers rm "$id" >/dev/null 2>&1 || true
    done
}

# remove_cgroup ROOT: the kubelet's cgroupRoot in every hierarchy, leaves first.
remove_cgroup() {
    local root=$1 h
    for h in /sys/fs/cgroup/*/; do
        [ -d "$h${root#/}" ] || continue
        find "$h${root#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
}

restore_sysctls_if_last() {
    [ -f "$SYSCTL_SAVED" ] || return 0
    # Another control plane with real nodes still running keeps them.
    [ -z "$(ls -A "$SYSCTL_HOLDERS" 2>/dev/null)" ] || return 0
    local s v
    while read -r s v; do
        echo "$v" >"/proc/sys/$s" 2>/dev/null || true
    done <"$SYSCTL_SAVED"
    rm -f "$SYSCTL_SAVED"
}
