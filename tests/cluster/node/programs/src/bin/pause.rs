//! The pod sandbox's process: sleeps until SIGTERM or SIGINT, reaping any child meanwhile.

use holdfast_node_programs as sig;

fn main() {
    sig::catch(sig::SIGTERM);
    sig::catch(sig::SIGINT);
    sig::catch(sig::SIGCHLD);
    loop {
        sig::wait_for_signal();
        match sig::take() {
            sig::SIGTERM | sig::SIGINT => std::process::exit(0),
            _ => sig::reap_children(),
        }
    }
}
