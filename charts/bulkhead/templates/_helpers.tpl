{{/*
Chart name, truncated to a DNS label.
*/}}
{{- define "bulkhead.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: release-chart, or the release name alone when it already contains
the chart name.
*/}}
{{- define "bulkhead.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
chart-version, as used by the helm.sh/chart label.
*/}}
{{- define "bulkhead.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "bulkhead.labels" -}}
helm.sh/chart: {{ include "bulkhead.chart" . }}
{{ include "bulkhead.selectorLabels" . }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: bulkhead
{{- end }}

{{/*
Selector labels (immutable on the Deployment: keep them few and stable).
*/}}
{{- define "bulkhead.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bulkhead.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount the operator runs as.
*/}}
{{- define "bulkhead.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bulkhead.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: repository@digest, or repository:tag (tag defaults to the
chart's appVersion).
*/}}
{{- define "bulkhead.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
"true" when the operator must take the leader-election Lease: asked for, or
more than one replica (two active controllers would fight over every object).
*/}}
{{- define "bulkhead.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/*
Name of the Lease the operator takes: one value for the --lease-name flag and
the Role's resourceNames, so that they cannot disagree.
*/}}
{{- define "bulkhead.leaseName" -}}
{{- if .Values.leaderElection.leaseName }}
{{- .Values.leaderElection.leaseName }}
{{- else if .Values.operatorName }}
{{- printf "bulkhead-operator-%s" .Values.operatorName }}
{{- else }}
{{- "bulkhead-operator" }}
{{- end }}
{{- end }}

{{/*
Fails when another release's operator Deployment, in any namespace, has this
release's operatorName: both would act on the same Bulkheads. lookup reads
the cluster on install and upgrade; helm template and --dry-run=client see
nothing, so the check needs a cluster to mean anything.
*/}}
{{- define "bulkhead.assertOnlyOperatorOfItsName" -}}
{{- $name := .Values.operatorName | default "" }}
{{- $deployments := lookup "apps/v1" "Deployment" "" "" }}
{{- range $d := ($deployments.items | default list) }}
{{- $labels := $d.metadata.labels | default dict }}
{{- if and (eq (get $labels "app.kubernetes.io/part-of") "bulkhead") (eq (get $labels "app.kubernetes.io/component") "operator") }}
{{- $same := and (eq $d.metadata.namespace $.Release.Namespace) (eq (get $labels "app.kubernetes.io/instance") $.Release.Name) }}
{{- if and (not $same) (eq (get $labels "bulkhead.dev/operator") $name) }}
{{- fail (printf "Deployment %s/%s already runs a bulkhead operator named %q (operatorName): two operators would act on the same Bulkheads. Give this release its own operatorName, and label the Bulkheads it should act on bulkhead.dev/operator=<that name>" $d.metadata.namespace $d.metadata.name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Where usage.caConfigMap is mounted, and the CA file the operator reads:
usage.caFile, or ca.crt of the mounted ConfigMap, or nothing (the system's CAs).
*/}}
{{- define "bulkhead.prometheusCaDir" -}}
/etc/bulkhead/prometheus-ca
{{- end }}

{{- define "bulkhead.prometheusCaFile" -}}
{{- if and .Values.usage.caFile .Values.usage.caConfigMap }}
{{- fail "usage.caFile and usage.caConfigMap both name the CA: give one" }}
{{- end }}
{{- if .Values.usage.caFile }}
{{- .Values.usage.caFile }}
{{- else if .Values.usage.caConfigMap }}
{{- printf "%s/ca.crt" (include "bulkhead.prometheusCaDir" .) }}
{{- end }}
{{- end }}

{{/*
Namespace of the Events about Bulkheads (fixed in the binary). A Bulkhead is
cluster-scoped, and the API server accepts Events about a cluster-scoped
object only in "default" (or kube-system); `kubectl describe bulkhead` finds
them there.
*/}}
{{- define "bulkhead.eventsNamespace" -}}
default
{{- end }}

{{/*
The webhook's failurePolicy: the value given, else Fail where the server
evaluates matchConditions (only pods that carry the operator's keys are then
sent, so an outage blocks those alone) and Ignore where it does not (every
pod is sent: Fail would block every pod of the cluster while the operator is
down; a pod admitted then is still audited).
*/}}
{{- define "bulkhead.webhookMatchConditions" -}}
{{- if semverCompare ">=1.28-0" .Capabilities.KubeVersion.Version }}true{{ end }}
{{- end }}

{{- define "bulkhead.webhookFailurePolicy" -}}
{{- if .Values.admission.failurePolicy }}{{ .Values.admission.failurePolicy }}
{{- else if include "bulkhead.webhookMatchConditions" . }}Fail
{{- else }}Ignore
{{- end }}
{{- end }}
