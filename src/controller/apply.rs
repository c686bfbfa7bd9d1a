//! Carry out planned changes: server-side apply with the operator's field
//! manager (it owns these objects outright, so it forces), deletes that
//! tolerate an object already gone.

use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::{
    api::{Api, DeleteParams, Patch, PatchParams},
    Client, Resource,
};
use serde::{de::DeserializeOwned, Serialize};

use super::{metrics::Metrics, Error};
use crate::{
    crd::{BULKHEAD_LABEL, FIELD_MANAGER},
    plan::Change,
    snapshot::ObjectKey,
};

pub async fn apply_changes(client: &Client, metrics: &Metrics, changes: &[Change]) -> Result<(), Error> {
    for change in changes {
        match change {
            Change::ApplyConfigMap(cm) => {
                let (ns, name) = names(&cm.metadata)?;
                apply(Api::<ConfigMap>::namespaced(client.clone(), ns), name, cm).await?;
                metrics.record_write("ConfigMap", "apply");
            }
            Change::ApplyQuota(rq) => {
                let (ns, name) = names(&rq.metadata)?;
                apply(Api::<ResourceQuota>::namespaced(client.clone(), ns), name, rq).await?;
                metrics.record_write("ResourceQuota", "apply");
            }
            Change::DeleteConfigMap(key) => {
                delete(Api::<ConfigMap>::namespaced(client.clone(), &key.namespace), key).await?;
                metrics.record_write("ConfigMap", "delete");
            }
            Change::DeleteQuota(key) => {
                delete(Api::<ResourceQuota>::namespaced(client.clone(), &key.namespace), key).await?;
                metrics.record_write("ResourceQuota", "delete");
            }
        }
    }
    Ok(())
}

fn names(meta: &kube::api::ObjectMeta) -> Result<(&str, &str), Error> {
    match (meta.namespace.as_deref(), meta.name.as_deref()) {
        (Some(ns), Some(name)) => Ok((ns, name)),
        _ => Err(Error::Unnamed("a planned child object")),
    }
}

/// Force-apply our object, but never take over one somebody else made under
/// the same name: deleting the Bulkhead would then delete their object too.
async fn apply<K>(api: Api<K>, name: &str, obj: &K) -> Result<(), Error>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug + Resource<DynamicType = ()>,
{
    if let Some(existing) = api.get_opt(name).await? {
        let owner = |o: &K| o.meta().labels.as_ref().and_then(|l| l.get(BULKHEAD_LABEL)).cloned();
        if owner(&existing).is_none() || owner(&existing) != owner(obj) {
            return Err(Error::NotOurs {
                kind: K::kind(&()).to_string(),
                key: ObjectKey::new(existing.meta().namespace.clone().unwrap_or_default(), name),
                owner: owner(&existing),
            });
        }
    }
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj)).await?;
    Ok(())
}

async fn delete<K>(api: Api<K>, key: &ObjectKey) -> Result<(), Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(&key.name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
