"""Running tenants: the dispatcher (queues, slots, admission), one
command's process, the context pool of persistent context processes, process
trees and the cgroups every command runs in."""
