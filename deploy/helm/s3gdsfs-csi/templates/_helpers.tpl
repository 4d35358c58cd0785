{{/* The image of the driver and the command. */}}
{{- define "s3gdsfs-csi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "s3gdsfs-csi.labels" -}}
app.kubernetes.io/name: s3gdsfs-csi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/*
The memory one daemon may use, in MiB: its peak RSS stays within 1.25 x
--memory-limit (docs/operations.md, memory pressure), plus its staging
ring per GPU, plus its overhead.
*/}}
{{- define "s3gdsfs-csi.daemonMiB" -}}
{{- $v := .Values -}}
{{- add (div (mul $v.daemon.memoryLimitMiB 5) 4) (mul $v.daemon.stagingMiBPerGPU $v.node.gpusPerNode) $v.daemon.overheadMiB -}}
{{- end -}}

{{/* The node plugin container's memory: every daemon it may run, and itself. */}}
{{- define "s3gdsfs-csi.nodeMiB" -}}
{{- add (mul (include "s3gdsfs-csi.daemonMiB" . | atoi) .Values.node.maxVolumes) .Values.node.pluginMemoryMiB -}}
{{- end -}}
