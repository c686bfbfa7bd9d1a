//! The one Deployment the end-to-end tests write as YAML: each test says only
//! what differs (labels, replicas, the container, its own scheduling fields).

/// A Deployment of pause containers selected by one label.
pub struct DeploymentYaml<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The selector's and the template's one label (`app: NAME` by default).
    pub label: (&'a str, &'a str),
    pub replicas: u32,
    /// The container's name (`c` by default).
    pub container: &'a str,
    /// Extra fields of the container, as flow-style YAML pairs (`ports: [...]`).
    pub container_fields: &'a str,
    /// Extra lines of the pod spec, each indented six spaces.
    pub pod_spec_lines: &'a str,
}

impl<'a> DeploymentYaml<'a> {
    pub fn new(namespace: &'a str, name: &'a str, replicas: u32) -> Self {
        Self {
            namespace,
            name,
            label: ("app", name),
            replicas,
            container: "c",
            container_fields: "",
            pod_spec_lines: "",
        }
    }

    pub fn render(&self) -> String {
        let Self { namespace, name, label: (key, value), replicas, container, container_fields, pod_spec_lines } = self;
        let fields = if container_fields.is_empty() { String::new() } else { format!(", {container_fields}") };
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  \
             replicas: {replicas}\n  selector: {{matchLabels: {{{key}: {value}}}}}\n  template:\n    \
             metadata: {{labels: {{{key}: {value}}}}}\n    spec:\n{pod_spec_lines}      \
             containers: [{{name: {container}, image: registry.k8s.io/pause:3.9{fields}}}]\n"
        )
    }
}
