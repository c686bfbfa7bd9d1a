//! The Bulkhead API without its types: reads and writes that must work on a
//! Bulkhead whose spec no longer decodes (finalizer, undecodable report).

use kube::{
    api::{Api, DynamicObject},
    core::GroupVersionKind,
    discovery::ApiResource,
    Resource,
};

use crate::controller::context::Context;
use crate::crd::Bulkhead;

pub(in crate::controller) fn dynamic_api(ctx: &Context) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&Bulkhead::group(&()), &Bulkhead::version(&()), &Bulkhead::kind(&()));
    Api::all_with(ctx.client.clone(), &ApiResource::from_gvk_with_plural(&gvk, &Bulkhead::plural(&())))
}
