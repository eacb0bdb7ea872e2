//! PVM 3 on openvia: pvmd, the task library and the global pool. (work in progress)
